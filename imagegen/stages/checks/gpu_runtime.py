"""The engine can give the container GPUs (the NVIDIA runtime, CDI specs or the prestart hook): skipped with
the reason without one, failed with --require-gpu."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, SKIP, Check

NAME = "gpu.runtime"
NAMES, PHASE, NEEDS = (NAME,), "gpu", ("native",)


def run(context: Context) -> list[Check]:
    if context.gpu:
        return [Check(NAME, PASS, context.gpu_reason)]
    return [Check(NAME, FAIL if context.require_gpu else SKIP, context.gpu_reason)]
