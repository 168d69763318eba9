"""Section 15: what VLM-R1's accuracy methods cost per completion, through `vlmgrpo score` as a user runs it.

For each method, make-tiny's rows of its task are scored against N and 10 x N completions (whole runs, from process
start: the model's processor loads either way). The difference over 9 x N is the cost of one completion, the ratio of
the two runs says whether the cost grows linearly, and each method's cost is compared with the REC `iou` reward's.
A GRPO step of Qwen2.5-VL-3B on VLM-R1's REC settings scores 8 x 8 = 64 completions per GPU.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .common import VLMGRPO, run, table

COMPLETIONS = 1_000
STEP_COMPLETIONS = 64  # VLM-R1's REC settings: 8 prompts x 8 generations per GPU and step
# (name, task file of make-tiny, the method's config, a completion of the row's answer)
METHODS = [
    ("iou (REC)", "rec.jsonl", ["--set", "reward_funcs=[iou]"], "<answer>{answer}</answer>"),
    ("mcq", "tasks/mcq.jsonl", ["--set", "reward_funcs=[jsonl_accuracy]", "--set", "reward_method=mcq"],
     "<think>It is that one.</think><answer>{answer}</answer>"),
    ("math", "tasks/math.jsonl", ["--set", "reward_funcs=[jsonl_accuracy]", "--set", "reward_method=math"],
     "<think>Count.</think><answer>\\boxed{{{answer}}}</answer>"),
    ("default", "tasks/math.jsonl", ["--set", "reward_funcs=[jsonl_accuracy]", "--set", "reward_method=default"],
     "<think>Count.</think><answer>{answer} pixels</answer>"),
    ("weighted_sum", "tasks/ovd.jsonl",
     ["--set", "reward_funcs=[jsonl_accuracy]", "--set", "reward_method=weighted_sum"], "<answer>{answer}</answer>"),
    ("od_ap", "tasks/ovd.jsonl", ["--set", "reward_funcs=[jsonl_accuracy]", "--set", "reward_method=od_ap"],
     "<answer>{answer}</answer>"),
    ("repetition", "tasks/ovd.jsonl", ["--set", "reward_funcs=[repetition]"], "<answer>{answer}</answer>"),
]


def completions(rows: Path, template: str, count: int, out: Path) -> Path:
    """count completions over the file's rows (named by file:line), half of them the row's answer, half another's."""
    answers = [json.loads(line)["conversations"][1]["value"] for line in rows.read_text().splitlines()]
    rng = random.Random(0)
    with out.open("w") as stream:
        for index in range(count):
            line = index % len(answers)
            answer = answers[line] if index % 2 else answers[rng.randrange(len(answers))]
            stream.write(json.dumps({"row": f"{rows}:{line + 1}", "completion": template.format(answer=answer)})
                         + "\n")
    return out


def section(work: Path) -> str:
    run([*VLMGRPO, "make-tiny", "--out", str(work / "tiny"), "--rows", "16"])
    data = work / "tiny" / "data"
    measured = []
    for name, task, options, template in METHODS:
        times = []
        for count in (COMPLETIONS, 10 * COMPLETIONS):
            given = completions(data / task, template, count, work / f"{name.split()[0]}-{count}.jsonl")
            times.append(run([*VLMGRPO, "score", "--model", str(work / "tiny" / "model"), "--data", str(data / task),
                              "--image-root", str(data / "images"), "--completions", str(given), *options],
                             log=work / f"{name.split()[0]}-{count}.log"))
        measured.append((name, times[0], times[1], (times[1] - times[0]) / (9 * COMPLETIONS)))
    base = measured[0][3]
    rows = [(name, f"{small:.1f} s", f"{large:.1f} s", f"{each * 1e3:.3f} ms", f"{large / small:.2f}",
             f"{each / base:.1f}" if base > 0 else "-") for name, small, large, each in measured]
    return ("## 15. Scoring completions by VLM-R1's accuracy methods (`vlmgrpo score`)\n\n"
            f"Whole `vlmgrpo score` runs of make-tiny's rows against {COMPLETIONS:,} and {10 * COMPLETIONS:,} "
            "completions (half right, half another row's answer); per completion: the difference over the "
            f"{9 * COMPLETIONS:,} more.\n\n"
            + table(("method", f"{COMPLETIONS:,}", f"{10 * COMPLETIONS:,}", "per completion", "10x runs / 1x run",
                     "x iou's per completion"), rows)
            + f"\n\nAt {STEP_COMPLETIONS} completions per GPU and step, the slowest method here adds "
              f"{STEP_COMPLETIONS * max(each for *_, each in measured):.2f} s to a step.")
