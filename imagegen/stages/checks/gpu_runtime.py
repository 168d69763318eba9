"""The engine can give the container GPUs (the NVIDIA runtime, CDI specs or the prestart hook): the runner skips it
with the reason without one, and fails it with --require-gpu (NEEDS "gpu")."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import PASS, Check

NAME = "gpu.runtime"
NAMES, PHASE, NEEDS = (NAME,), "gpu", ("native", "gpu")


def run(context: Context) -> list[Check]:
    return [Check(NAME, PASS, context.gpu_reason)]
