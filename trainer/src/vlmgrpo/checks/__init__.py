"""The in-image checks of `vlmgrpo selftest`: one module per check (or tight family) in this package, found by
discovery (pkgutil over the package, as jupyter/docker-stacks finds its test units), so adding a check is one file
here and its test.

Each check module defines (the contract of imagegen's host checks too, imagegen/stages/checks):
  NAMES  tuple of the check names it reports (each is reported when it fails with an exception or a need is unmet);
  ORDER  an int: where its checks go in the report (modules run in this order);
  NEEDS  tuple of what it applies to: "gpu" (a visible GPU), or a component key ("vllm", "flash_attn",
         "deepspeed"): an image that has the component, by expected.json or by what is installed. run_checks skips
         a module whose need is unmet without calling it (a missing GPU fails it with --require-gpu), so that rule
         lives here only and a check attached to a component never asks whether the image has it;
  run(context) -> list of result(name, status, detail) dicts, the fields of imagegen's Check.

Modules whose names start with "_" are not checks. Every optional library may be missing: a check says so in its
result instead of crashing, and an exception in one check fails its names without hiding the others.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Optional

from vlmgrpo.inventory import installed_version

PASS, FAIL, SKIP = "pass", "fail", "skip"
NO_GPU = "no GPU visible"
GPU = "gpu"  # the need that is not a component key


@dataclass
class Context:
    """What every check may read."""

    expected: Optional[dict]  # imagegen's expected-versions file; None when there is none
    expected_problem: Optional[str] = None  # why the versions cannot be checked (no file, or an unusable one)
    require_gpu: bool = False  # GPU checks fail instead of skip when no GPU is visible
    skip_train: bool = False


def result(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def expected_version(expected: Optional[dict], key: str) -> Any:
    return ((expected or {}).get("versions") or {}).get(key)


def discover() -> list:
    """Every check module of the package, in ORDER."""
    modules = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
               if not info.name.startswith("_")]
    return sorted(modules, key=lambda module: (module.ORDER, module.__name__))


def gpu_visible() -> tuple[bool, str]:
    try:
        import torch

        return torch.cuda.is_available(), NO_GPU
    except ImportError as exc:
        return False, f"{NO_GPU} (torch not importable: {exc})"


def has_component(expected: Optional[dict], key: str) -> tuple[bool, str]:
    """Whether the image has a component (expected.json names a version, or its distribution is installed: a check
    still runs on one installed against the file, which version.<key> fails), and why not."""
    if expected_version(expected, key):
        return True, ""
    distribution = ((expected or {}).get("distributions") or {}).get(key) or key.replace("_", "-")
    if installed_version(distribution) is not None:
        return True, ""
    if expected is None:
        return False, f"{distribution} not installed"
    if key in (expected.get("versions") or {}):
        return False, f"no {key} in this image (expected.json: {key} none)"
    return False, f"no {key} in this image (expected.json does not name it)"


def unmet_need(module, context: Context, gpu: Callable[[], tuple[bool, str]]) -> Optional[tuple[str, str]]:
    """(status, why) when the module does not apply here: a component it needs is absent (a skip), else no GPU is
    visible and it needs one (a skip, a failure with --require-gpu). None when it applies."""
    for need in module.NEEDS:
        if need != GPU:
            has, why = has_component(context.expected, need)
            if not has:
                return SKIP, why
    if GPU in module.NEEDS:
        visible, why = gpu()
        if not visible:
            return (FAIL if context.require_gpu else SKIP), why
    return None


def run_checks(context: Context, modules: Optional[list] = None) -> list[dict[str, str]]:
    """The results of the check modules (every one discovered, or those given), each applied by its needs."""
    results: list[dict[str, str]] = []
    gpu = functools.lru_cache(maxsize=1)(gpu_visible)  # asked once, and only when a check needs a GPU
    for module in discover() if modules is None else modules:
        unmet = unmet_need(module, context, gpu)
        if unmet:
            results += [result(name, *unmet) for name in module.NAMES]
            continue
        try:
            results += module.run(context)
        except Exception as exc:  # one broken library must not hide the other checks
            results += [result(name, FAIL, f"{type(exc).__name__}: {exc}"[:1000]) for name in module.NAMES]
    return results
