"""The checks of a built image, one module each, found by discovery (as jupyter/docker-stacks finds its
units). Adding a check is one file and its test. Each module of this package but `context` says, as the
image's own checks do (vlmgrpo.checks, whose report the `selftest` check brings in):
  NAMES  the check names it reports (each reported when it raises ContainerError or a need is unmet); a name may
         stand for a family: "inside" covers inside.<label>, "selftest" selftest.<name> (reported_outside);
  PHASE  one of PHASES: modules run, and report, phase by phase, by module name within a phase;
  NEEDS  what it applies to: "native" (the image runs natively: under QEMU user emulation, an arm64 image
         on an x86_64 host, importing torch hangs or crashes), "matrix" (a matrix entry to compare with),
         "gpu" (the engine gives containers GPUs), "inventory" (the inventory program ran in the image: the
         inside.inventory check says why not), or a component key (the image's label for it names a version). run_checks skips a module whose need is unmet, with the reason, without running it;
  run(context) -> list[Check].
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from types import ModuleType

from imagegen.engine import containers
from imagegen.render.locked import LockedImage
from imagegen.stages.checks.context import Context, native_only
from imagegen.stages.results import FAIL, SKIP, Check, TestResult

NATIVE, MATRIX, GPU, INVENTORY = "native", "matrix", "gpu", "inventory"  # the needs that are not component keys
# The report's sections, in order: the image's own facts (labels, USER), its commands, its inventory and what is
# judged by it (ELF machines, versions, the tag), the engine's GPU runtime, then the image's own selftest.
PHASES = ("image", "commands", "inventory", "inside", "gpu", "selftest")


def place(module: ModuleType) -> tuple[int, str]:
    """Where a module's checks go: its phase, then its name."""
    if getattr(module, "PHASE", None) not in PHASES:
        raise ValueError(f"{module.__name__}: PHASE is {getattr(module, 'PHASE', None)!r}, not one of {PHASES}")
    return PHASES.index(module.PHASE), module.__name__


def discovered() -> list[ModuleType]:
    """Every check module, phase by phase."""
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
             if info.name != "context"]
    return sorted(found, key=place)


def reported_outside(module: ModuleType, checks: list[Check]) -> list[str]:
    """The names a module reported that its NAMES do not declare (a name, or a family's name then a dot)."""
    return [check.name for check in checks
            if not any(check.name == name or check.name.startswith(name + ".") for name in module.NAMES)]


def unmet_need(module: ModuleType, context: Context) -> tuple[str, str] | None:
    """(status, why) when the module does not apply to this image (a skip; no GPU fails it with --require-gpu),
    None when it applies."""
    for need in module.NEEDS:
        if need == NATIVE and context.emulated:
            return SKIP, native_only(context.platform)
        if need == MATRIX and context.image is None:
            return SKIP, "no matrix entry given; the image's own labels are the reference"
        if need == INVENTORY and context.inventory() is None:
            return SKIP, "no inventory (inside.inventory says why)"
        if need not in (NATIVE, MATRIX, GPU, INVENTORY) and context.component_version(need) is None:
            return SKIP, f"no {need} in this image (its labels name no version of it)"
    if GPU in module.NEEDS and not context.gpu:
        return (FAIL if context.require_gpu else SKIP), context.gpu_reason
    return None


def run_checks(context: Context) -> list[Check]:
    checks: list[Check] = []
    for module in discovered():
        unmet = unmet_need(module, context)
        if unmet:
            checks += [Check(name, *unmet) for name in module.NAMES]
            continue
        try:
            checks += module.run(context)
        except containers.ContainerError as error:  # the engine could not run what the check needs
            checks += [Check(name, FAIL, str(error)) for name in module.NAMES]
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


