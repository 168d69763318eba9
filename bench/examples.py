"""Section 7: the tiny examples of examples/README.md on this CPU, each command timed from process start."""

from __future__ import annotations

import shutil
from pathlib import Path

from .common import REPO, VLMGRPO, goal, run, table

# What examples/README.md and the user guide promise for these runs on a CPU.
REC_GOAL_S = 60
SFT_THEN_GRPO_GOAL_S = 120


def section(work: Path) -> str:
    for name in ("rec_tiny.yaml", "sft_tiny.yaml"):
        shutil.copy(REPO / "examples" / name, work)
    commands = [
        ("make-tiny", ["make-tiny", "--out", work / "tiny"]),
        ("train rec_tiny.yaml", ["train", "--config", work / "rec_tiny.yaml", "--output", work / "grpo"]),
        ("sft sft_tiny.yaml", ["sft", "--config", work / "sft_tiny.yaml", "--output", work / "sft"]),
        ("train rec_tiny.yaml --model SFT/merged", ["train", "--config", work / "rec_tiny.yaml", "--model",
                                                    work / "sft" / "merged", "--output", work / "grpo-after-sft"]),
    ]
    seconds = {label: run([*VLMGRPO, *map(str, argv)], log=work / f"{argv[0]}-{index}.log")
               for index, (label, argv) in enumerate(commands)}
    rec_s = seconds["make-tiny"] + seconds["train rec_tiny.yaml"]
    two_stage_s = sum(seconds[label] for label in ("make-tiny", "sft sft_tiny.yaml",
                                                    "train rec_tiny.yaml --model SFT/merged"))
    return "\n".join([
        "## 7. The tiny examples on a CPU",
        "",
        "Each `vlmgrpo` command of examples/README.md run once, in this order, timed from process start to exit "
        "(Python start-up, imports and model loading included): 8 GRPO steps of `rec_tiny.yaml`, 8 LoRA SFT "
        "steps of `sft_tiny.yaml` with evaluations at steps 4 and 8 and the merge, then 8 GRPO steps from the "
        "merged model.",
        "",
        table(("command", "wall s"), [(label, f"{value:.1f}") for label, value in seconds.items()]),
        "",
        f"- `rec_tiny.yaml` (make-tiny, train): **{rec_s:.1f} s**; goal under {REC_GOAL_S} s: "
        f"{goal(rec_s < REC_GOAL_S)}.",
        f"- SFT then GRPO (make-tiny, sft, train from the merge): **{two_stage_s:.1f} s**; goal under "
        f"{SFT_THEN_GRPO_GOAL_S} s: {goal(two_stage_s < SFT_THEN_GRPO_GOAL_S)}.",
    ])
