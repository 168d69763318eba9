"""`make-tiny`'s rows for VLM-R1's other tasks, on the same rectangle images as its REC rows: open-vocabulary
detection (a ```json list of labelled boxes), math (a number), multiple choice (a letter) and GUI comparison (two
images, yes or no). Each is a VLM-R1 grpo_jsonl.py file: conversations with one <image> per image, the answer in the
gpt turn. examples/*_tiny.yaml train on them."""

from __future__ import annotations

import json
from pathlib import Path

TASKS = ("ovd", "math", "mcq", "gui")
LETTERS = "ABCD"


def _ovd(name: str, color: str, box: list[int], colors: list[str]) -> dict:
    kinds = ", ".join(f"{c} rectangle" for c in colors)
    answer = "```json\n" + json.dumps([{"bbox_2d": box, "label": f"{color} rectangle"}]) + "\n```"
    return _row(name, f"<image>Find every object of these kinds: {kinds}. Give each one's bbox_2d and label as a JSON "
                      "list.", answer)


def _math(name: str, color: str, box: list[int]) -> dict:
    return _row(name, f"<image>How many pixels wide is the {color} rectangle?", str(box[2] - box[0]))


def _mcq(name: str, color: str, colors: list[str], shift: int) -> dict:
    options = colors[shift:] + colors[:shift]
    listed = " ".join(f"{letter}. {option}" for letter, option in zip(LETTERS, options))
    return _row(name, f"<image>What colour is the rectangle? {listed}", LETTERS[options.index(color)])


def _gui(first: tuple[str, str], second: tuple[str, str]) -> dict:
    same = "yes" if first[1] == second[1] else "no"
    return {"image": [first[0], second[0]], "conversations": [
        {"from": "human", "value": "<image><image>These are two screens, before and after a click. Is the rectangle "
                                   "the same colour on both? Answer yes or no."},
        {"from": "gpt", "value": same}]}


def _row(image: str, question: str, answer: str) -> dict:
    return {"image": image, "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]}


def write_task_rows(out_dir: Path, rectangles: list[tuple[str, str, list[int]]], colors: list[str]) -> dict[str, str]:
    """OUT/tasks/{ovd,math,mcq,gui}.jsonl from (image name, colour, box) of each image; their paths by task."""
    folder = out_dir / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    rows = {
        "ovd": [_ovd(name, color, box, colors) for name, color, box in rectangles],
        "math": [_math(name, color, box) for name, color, box in rectangles],
        "mcq": [_mcq(name, color, colors, index % len(colors)) for index, (name, color, _) in enumerate(rectangles)],
        "gui": [_gui(rectangles[i][:2], rectangles[(i + 1) % len(rectangles)][:2]) for i in range(len(rectangles))],
    }
    paths = {}
    for task in TASKS:
        paths[task] = str(folder / f"{task}.jsonl")
        Path(paths[task]).write_text("".join(json.dumps(row) + "\n" for row in rows[task]))
    return paths
