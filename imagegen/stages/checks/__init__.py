"""The checks of a built image, one module each, found by discovery (as jupyter/docker-stacks finds its
units): each module of this package but `context` says NAME, ORDER and `run(context) -> list[Check]`.
Adding a check is one file and its test.

`test_image` runs every check on one image. An image of another platform than the engine's (arm64 on an
x86_64 host) runs under QEMU user emulation, where importing torch hangs or crashes: a check that needs
torch says so (`context.native_only()`) and skips; the others read the inventory, which needs no torch.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from types import ModuleType

from imagegen.engine import containers
from imagegen.render.locked import LockedImage
from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, Check, TestResult


def discovered() -> list[ModuleType]:
    """Every check module, in ORDER."""
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
             if info.name != "context"]
    return sorted(found, key=lambda module: (module.ORDER, module.__name__))


def run_checks(context: Context) -> list[Check]:
    checks: list[Check] = []
    for module in discovered():
        try:
            checks += module.run(context)
        except containers.ContainerError as error:  # the engine could not run what the check needs
            checks.append(Check(module.NAME, FAIL, str(error)))
    return checks


def test_image(ref: str, image: LockedImage | None, require_gpu: bool, skip_train: bool, inventory_program: str,
               client=None) -> TestResult:
    """Every check on one image; a failure is a result, not an exception."""
    started = time.monotonic()
    context = Context.of(ref, image, require_gpu, skip_train, inventory_program, client)
    checks = run_checks(context)
    failed = any(check.status == FAIL for check in checks)
    return TestResult(image=image.name if image else context.labels.get("image", ref), ref=ref,
                      status="failed" if failed else "passed", platform=context.platform,
                      mode="emulated" if context.emulated else "gpu" if context.gpu else "native",
                      image_id=context.facts["id"], gpu_runtime=context.gpu, gpu_reason=context.gpu_reason,
                      duration_s=round(time.monotonic() - started, 1), checks=checks)


