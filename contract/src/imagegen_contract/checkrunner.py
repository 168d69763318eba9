"""The one check runner: imagegen's host checks (imagegen/stages/checks) and the image's own (vlmgrpo.image.checks, which
`vlmgrpo selftest` reports) are found, ordered, applied and run here, by one contract.

Standard library only, and it imports nothing of vlmgrpo: the image imports it as imagegen_contract.checkrunner, and imagegen
loads this file from the trainer source the images are built from, as it loads the inventory program
(imagegen.stages.inventory.runner), so that a change to the contract is made once.

A check module says:
  NAMES  the check names it reports (each reported when it fails to run or a need is unmet); a name may stand for a
         family: "version" covers version.<key> (reported_outside says which names fit);
  PHASE  one of its side's phases: modules run, and report, phase by phase, by module name within a phase;
  NEEDS  what it applies to. The side judges each need (judge(need) -> None when met, else (status, why)); the runner
         asks them in order, GPU last but for the needs that look at the GPU (after_gpu), stops at the first unmet one
         and reports the module's names with it, without calling the module: a check never asks whether it applies.
         Each side declares the needs it judges (component keys of the matrix among them): a module naming another
         fails its names, saying which (a misspelt need would otherwise skip the check for good);
  run(context) -> its results, each made by the side's result(name, status, detail).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Collection, Iterable, Optional, Sequence, Tuple, Type, Union

PASS, FAIL, SKIP = "pass", "fail", "skip"
GPU = "gpu"  # the need both sides judge last: not applicable (a skip) beats no GPU (a failure with --require-gpu)
Unmet = Optional[Tuple[str, str]]


def component_in(expected: dict, key: str) -> Tuple[bool, str]:
    """Whether an image has a component, and why not: whether its expected file (imagegen.render.expected, read by
    the inventory) names a version of it. The one rule of both sides' component needs: a component installed against
    the file is version.<key>'s failure, not a reason to run the component's checks."""
    versions = expected.get("versions") or {}
    if versions.get(key):
        return True, ""
    if key in versions:
        return False, f"no {key} in this image (expected.json: {key} none)"
    return False, f"no {key} in this image (expected.json does not name it)"


def place(module: Any, phases: Sequence[str]) -> tuple[int, str]:
    """Where a module's checks go: its phase, then its name."""
    if getattr(module, "PHASE", None) not in phases:
        raise ValueError(f"{module.__name__}: PHASE is {getattr(module, 'PHASE', None)!r}, not one of {tuple(phases)}")
    return phases.index(module.PHASE), module.__name__


def discover(package: str, path: Iterable[str], phases: Sequence[str],
             is_check: Callable[[str], bool] = lambda name: not name.startswith("_")) -> list:
    """Every check module of a package (the modules in its path whose names is_check accepts), phase by phase."""
    found = [importlib.import_module(f"{package}.{info.name}") for info in pkgutil.iter_modules(list(path))
             if is_check(info.name)]
    return sorted(found, key=lambda module: place(module, phases))


def reported_outside(module: Any, names: Iterable[str]) -> list[str]:
    """The names a module reported that its NAMES do not declare (a name, or a family's name then a dot)."""
    return [name for name in names
            if not any(name == declared or name.startswith(declared + ".") for declared in module.NAMES)]


def unmet_need(needs: Sequence[str], judge: Callable[[str], Unmet], after_gpu: Sequence[str] = ()) -> Unmet:
    """The first unmet need's (status, why), None when every need is met: the needs in their order, then the GPU,
    then those that look at the GPU."""
    ordered = [need for need in needs if need != GPU and need not in after_gpu]
    ordered += [need for need in needs if need == GPU] + [need for need in needs if need in after_gpu]
    for need in ordered:
        unmet = judge(need)
        if unmet:
            return unmet
    return None


def unknown_need(module: Any, known: Collection[str]) -> Optional[str]:
    """Why a module's NEEDS cannot be judged (one names a need its side does not declare), None when all can."""
    for need in module.NEEDS:
        if need not in known:
            return (f"{module.__name__} needs {need!r}, which is neither a need this side judges nor a component of "
                    f"the matrix it knows ({', '.join(sorted(known))}): correct the module's NEEDS")
    return None


def run_checks(modules: Iterable[Any], context: Any, judge: Callable[[str], Unmet],
               result: Callable[[str, str, str], Any], failure: Union[Type[BaseException], Tuple[Type[BaseException], ...]],
               describe: Callable[[BaseException], str] = str, after_gpu: Sequence[str] = (),
               known: Collection[str] = ()) -> list:
    """The results of the modules, each applied by its needs (each of which must be in `known`, else it fails);
    a module that raises `failure` fails its names with describe(the exception), without hiding the others."""
    results: list = []
    for module in modules:
        unknown = unknown_need(module, known)
        if unknown:
            results += [result(name, FAIL, unknown) for name in module.NAMES]
            continue
        unmet = unmet_need(module.NEEDS, judge, after_gpu)
        if unmet:
            results += [result(name, *unmet) for name in module.NAMES]
            continue
        try:
            results += module.run(context)
        except failure as error:
            results += [result(name, FAIL, describe(error)) for name in module.NAMES]
    return results
