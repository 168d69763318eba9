"""`vlmgrpo selftest`, the checks the image runs on itself (cuDNN and NCCL as torch reports them, ABI, GPU, NCCL,
flash-attn, a two-step GRPO run), each reported here as selftest.<name>; on a GPU where the engine can give one. The
versions the inventory reads are not asked of it: version.<key> reports the inventory's verdict (versions.py)."""

import json

from imagegen.stages.checks.context import Context, tail
from imagegen.stages.results import FAIL, Check

NAME = "selftest"
NAMES, PHASE, NEEDS = (NAME,), "selftest", ("native",)
TIMEOUT_S = 1800


def checks_of(report_text: str, exit_code: int, stderr: str) -> list[Check]:
    try:
        report = json.loads(report_text)
        checks = [Check(f"{NAME}.{c['name']}", c["status"], c.get("detail", "")) for c in report["checks"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [Check(NAME, FAIL, f"exit {exit_code}, no report: {tail(stderr or report_text)}")]
    if exit_code != 0 and not any(check.status == FAIL for check in checks):
        checks.append(Check(NAME, FAIL, f"exit {exit_code} with no failing check"))
    return checks


def run(context: Context) -> list[Check]:
    # version.<key> is the inventory's verdict, which the host reports itself (checks/versions.py): asked once
    args = [NAME, "--skip-versions"] + (["--require-gpu"] if context.require_gpu else []) + \
        (["--skip-train"] if context.skip_train else [])
    done = context.run(args, timeout_s=TIMEOUT_S, gpu=context.gpu, shm_size="2g")
    return checks_of(done.stdout, done.exit_code, done.stderr)
