"""train.tiny_grpo: two real GRPO steps through the CLI on a tiny model generated here, in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from imagegen_contract.inventory import installed_version
from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("train.tiny_grpo",)
PHASE = "train"
NEEDS = ("train",)
TRAIN_TIMEOUT_S = 900


def train_command(paths: dict, output: str) -> list[str]:
    return [sys.executable, "-m", "vlmgrpo", "train", "--model", paths["model"], "--data", paths["data"],
            "--image-root", paths["image_root"], "--output", output, "--max-steps", "2", "--num-generations", "2",
            "--batch-size", "2", "--max-completion-length", "8", "--save-steps", "1000",
            "--set", "gradient_accumulation_steps=1"]


def tiny_train_check() -> dict[str, str]:
    name = NAMES[0]
    for module in ("trl", "transformers", "torch"):
        if installed_version(module) is None:
            return result(name, FAIL, f"{module} not installed")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vlmgrpo-selftest-") as work:
        environment = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        try:
            made = subprocess.run([sys.executable, "-m", "vlmgrpo", "make-tiny", "--out", work, "--rows", "4"],
                                  capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S, env=environment)
            if made.returncode:
                return result(name, FAIL, f"make-tiny exited {made.returncode}: {made.stderr.strip()[-500:]}")
            paths = json.loads(made.stdout.strip().splitlines()[-1])
            trained = subprocess.run(train_command(paths, os.path.join(work, "out")), capture_output=True, text=True,
                                     timeout=TRAIN_TIMEOUT_S, env=environment)
        except subprocess.TimeoutExpired:
            return result(name, FAIL, f"did not finish within {TRAIN_TIMEOUT_S} s")
    seconds = time.monotonic() - started
    if trained.returncode:
        return result(name, FAIL, f"train exited {trained.returncode}: {trained.stderr.strip()[-800:]}")
    steps = [line for line in trained.stdout.splitlines() if line.startswith("step ")]
    if len(steps) != 2:
        return result(name, FAIL, f"expected 2 logged steps, got {len(steps)}: {trained.stdout[-500:]}")
    # Which attention the run chose, and why: the one line users look for in an image's report.
    chose = next((line.split("attention: ", 1)[1] for line in trained.stderr.splitlines() if "attention: " in line),
                 "not said")
    return result(name, PASS, f"2 GRPO steps in {seconds:.1f} s (incl. model generation); attention: {chose}; "
                              f"last: {steps[-1]}")


def run(context: Context) -> list[dict[str, str]]:
    return [tiny_train_check()]
