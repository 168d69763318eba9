"""The in-image checks of `vlmgrpo selftest`: one module per check (or tight family) in this package, found by
discovery (pkgutil over the package, as jupyter/docker-stacks finds its test units), so adding a check is one file
here and its test.

Each check module defines:
  NAMES      tuple of the check names it reports (its name when it fails with an exception or needs a GPU);
  ORDER      an int: where its checks go in the report (modules run in this order);
  NEEDS_GPU  True when it cannot run without a visible GPU: run_checks then skips it (fails it with --require-gpu)
             without calling it, so the GPU-skip logic lives here only;
  run(context) -> list of result(name, status, detail) dicts.

Modules whose names start with "_" are not checks. Every optional library may be missing: a check says so in its
result instead of crashing, and an exception in one check fails its names without hiding the others.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Optional

PASS, FAIL, SKIP = "pass", "fail", "skip"
NO_GPU = "no GPU visible"


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


def run_checks(context: Context) -> list[dict[str, str]]:
    results: list[dict[str, str]] = []
    gpu: Optional[tuple[bool, str]] = None
    for module in discover():
        if module.NEEDS_GPU:
            gpu = gpu or gpu_visible()
            if not gpu[0]:
                results += [result(name, FAIL if context.require_gpu else SKIP, gpu[1]) for name in module.NAMES]
                continue
        try:
            results += module.run(context)
        except Exception as exc:  # one broken library must not hide the other checks
            results += [result(name, FAIL, f"{type(exc).__name__}: {exc}"[:1000]) for name in module.NAMES]
    return results
