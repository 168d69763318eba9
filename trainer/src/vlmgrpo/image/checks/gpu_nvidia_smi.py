"""gpu.nvidia_smi: the driver's tool lists the GPUs."""

from __future__ import annotations

import subprocess

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.nvidia_smi",)
PHASE = "driver"
NEEDS = ("gpu",)


def nvidia_smi() -> tuple[str, str]:
    try:
        completed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FAIL, f"nvidia-smi did not run: {exc}"
    lines = [line for line in completed.stdout.splitlines() if line.startswith("GPU ")]
    if completed.returncode or not lines:
        return FAIL, (f"nvidia-smi -L exited {completed.returncode}: "
                      f"{(completed.stderr or completed.stdout).strip()[:200]}")
    return PASS, "; ".join(lines)


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.nvidia_smi", *nvidia_smi())]
