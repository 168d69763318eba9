"""The checks of a built image, one module each, found by discovery (as jupyter/docker-stacks finds its
units) and run by the check runner the image's own checks run by (imagegen_contract.checkrunner, the contract both
install: stages.inventory.runner). Adding a check is one file and its test. Each module of this package but
`context` says, as the image's own checks do (vlmgrpo.image.checks, whose report the `selftest` check brings in):
  NAMES  the check names it reports (each reported when it raises ContainerError or a need is unmet); a name may
         stand for a family: "inside" covers inside.<label>, "version" version.<key>, "selftest"
         selftest.<name> (reported_outside);
  PHASE  one of PHASES: modules run, and report, phase by phase, by module name within a phase;
  NEEDS  what it applies to: "native" (the image runs natively: under QEMU user emulation, an arm64 image on an
         x86_64 host, importing torch hangs or crashes), "matrix" (a matrix entry to compare with), "gpu" (the engine
         gives containers GPUs), "inventory" (the inventory program ran in the image: the inside.inventory check says
         why not), "expected" (the inventory read an expected.json in the image: asked after "inventory"), or a
         component key (the image's expected.json names a version of it: checkrunner.component_in, the rule the
         image's own checks judge by). judge says whether this image has each;
         run_checks skips a module whose need is unmet, with the reason, without running it;
  run(context) -> list[Check].
"""

from __future__ import annotations

import time
from types import ModuleType

from imagegen.engine import containers
from imagegen.render.expected import PATH
from imagegen.render.locked import LockedImage
from imagegen.stages.checks.context import Context, native_only
from imagegen.stages.results import FAIL, SKIP, Check, TestResult

# the needs that are not component keys
NATIVE, MATRIX, GPU, INVENTORY, EXPECTED = "native", "matrix", "gpu", "inventory", "expected"
NEEDS_JUDGED = (NATIVE, MATRIX, GPU, INVENTORY, EXPECTED)
# The report's sections, in order: the image's own facts (labels, USER), its commands, its inventory and what is
# judged by it (ELF machines, versions, the tag), the engine's GPU runtime, then the image's own selftest.
PHASES = ("image", "commands", "inventory", "inside", "gpu", "selftest")


def discovered(runner: ModuleType) -> list[ModuleType]:
    """Every check module, phase by phase."""
    return runner.discover(__name__, __path__, PHASES, lambda name: name != "context")


def reported_outside(runner: ModuleType, module: ModuleType, checks: list[Check]) -> list[str]:
    """The names a module reported that its NAMES do not declare (a name, or a family's name then a dot)."""
    return runner.reported_outside(module, [check.name for check in checks])


def judge(need: str, context: Context) -> tuple[str, str] | None:
    """(status, why) when this image lacks what a check needs (a skip; no GPU fails it with --require-gpu), None when
    it has it."""
    if need == NATIVE and context.emulated:
        return SKIP, native_only(context.platform)
    if need == MATRIX and context.image is None:
        return SKIP, "no matrix entry given; the image's own labels are the reference"
    if need == INVENTORY and context.inventory() is None:
        return SKIP, "no inventory (inside.inventory says why)"
    if need == EXPECTED and context.inventory().get("expected") is None:  # asked after "inventory"
        return SKIP, f"the image holds no expected file ({PATH}): nothing says what it was built to hold"
    if need == GPU and not context.gpu:
        return (FAIL if context.require_gpu else SKIP), context.gpu_reason
    if need not in (NATIVE, MATRIX, GPU, INVENTORY, EXPECTED):  # a component key: read as the image reads it
        found = context.inventory()
        if found is None or found.get("expected") is None:
            return judge(INVENTORY, context) or judge(EXPECTED, context)
        has, why = context.runner.component_in(found["expected"], need)
        return None if has else (SKIP, why)
    return None


def unmet_need(module: ModuleType, context: Context) -> tuple[str, str] | None:
    """(status, why) when the module does not apply to this image, None when it applies: its needs in order, the
    GPU last (not applicable beats no GPU)."""
    return context.runner.unmet_need(module.NEEDS, lambda need: judge(need, context))


def run_checks(context: Context) -> list[Check]:
    """Every check on one image; one the engine could not run (a ContainerError) fails its names."""
    return context.runner.run_checks(discovered(context.runner), context, lambda need: judge(need, context), Check,
                                     containers.ContainerError, known=known_needs(context))


def known_needs(context: Context) -> tuple[str, ...]:
    """The needs judged here: its own, and the component keys of the matrix (those of the image's entry, or of the
    image's own expected.json for an image given by reference): a module naming another fails, saying which."""
    if context.image is not None:
        return NEEDS_JUDGED + context.image.plan.components.keys
    found = context.inventory() or {}
    return NEEDS_JUDGED + tuple(((found.get("expected") or {}).get("labels") or {}))


def test_image(ref: str, image: LockedImage | None, require_gpu: bool, skip_train: bool, inventory_program: str,
               runner: ModuleType, client=None) -> TestResult:
    """Every check on one image; a failure is a result, not an exception."""
    started = time.monotonic()
    context = Context.of(ref, image, require_gpu, skip_train, inventory_program, runner, client)
    checks = run_checks(context)
    failed = any(check.status == FAIL for check in checks)
    return TestResult(image=image.name if image else context.labels.get("image", ref), ref=ref,
                      status="failed" if failed else "passed", platform=context.platform,
                      mode="emulated" if context.emulated else "gpu" if context.gpu else "native",
                      image_id=context.facts["id"], gpu_runtime=context.gpu, gpu_reason=context.gpu_reason,
                      duration_s=round(time.monotonic() - started, 1), checks=checks)


