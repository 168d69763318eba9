"""gpu.deepspeed_ops: DeepSpeed's ds_report runs and lists its ops; in an image with DeepSpeed (run_checks skips it in
one without)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from imagegen_contract.inventory import installed_version
from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.deepspeed_ops",)
PHASE = "gpu"
NEEDS = ("deepspeed", "gpu")


def deepspeed_ops() -> tuple[str, str]:
    if installed_version("deepspeed") is None:
        return FAIL, "deepspeed not installed"
    try:
        command = [shutil.which("ds_report")] if shutil.which("ds_report") else [
            sys.executable, "-c", "from deepspeed.env_report import cli_main; cli_main()"]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FAIL, f"ds_report did not run: {exc}"
    ops = [" ".join(line.split()) for line in completed.stdout.splitlines() if "[" in line and "]" in line
           and ("OKAY" in line or "NO" in line or "YES" in line)]
    if completed.returncode:
        return FAIL, f"ds_report exited {completed.returncode}: {completed.stderr.strip()[-300:]}"
    return PASS, "; ".join(ops)[:2000]


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.deepspeed_ops", *deepspeed_ops())]
