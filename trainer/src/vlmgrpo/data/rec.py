"""REC data: VLM-R1 rows with a box in the answer, read by datasets.py, validated up front, images loaded lazily.

Two row forms are read, in either file type:
  conversations: {"image": "a.jpg" | [...], "conversations": [{"from": "human", "value": "<image>..."},
                  {"from": "gpt", "value": "<answer>[x1,y1,x2,y2]</answer>"}]}
                  -- one <image> placeholder per image, at the image's position.
  problem:       {"image": ..., "problem": "...", "solution": [x1,y1,x2,y2] | "text with a box"}
                  -- placeholders optional; without them the images go before the question.
A row without "image" is text-only, as in VLM-R1. Boxes are stored in original-image pixels of the first image
whatever space the dataset declares (a text-only row's box as written). Rows may carry an "id" (`vlmgrpo score`
refers to rows by it) and an "accu_reward_method" (the jsonl_accuracy reward's method for the row, as in VLM-R1).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Optional

from vlmgrpo.rewards.accuracy import DEFAULT_METHOD, method_problem
from vlmgrpo.boxes import Box, is_valid_box, parse_label, to_absolute
from vlmgrpo.data.datasets import PLACEHOLDER, DatasetSpec, content_parts, load_rgb, row_image_paths
from vlmgrpo.config.template import fill_template


@dataclass
class Sample:
    location: str  # file:line, for error messages and completion dumps
    row_id: Any  # the row's "id", or its location when it has none
    image_paths: list[str]  # empty for a text-only row
    question: str
    answer: str  # the row's answer as text
    solution: Optional[Box]  # original-image pixels of the first image; None when the answer holds no box
    image_sizes: list[tuple[int, int]]  # (width, height)
    reward_method: str = DEFAULT_METHOD  # jsonl_accuracy's: the row's accu_reward_method, else its file's


def _question_and_answer(record: dict) -> tuple[Optional[str], Any, bool, Optional[str]]:
    """(question, answer, placeholders required, problem)."""
    if "conversations" in record:
        turns = record["conversations"]
        if not isinstance(turns, list):
            return None, None, True, "'conversations' is not a list"
        human = [t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")]
        answer = [t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in ("gpt", "assistant")]
        if not human or not answer:
            return None, None, True, "'conversations' needs a human turn and a gpt turn"
        return str(human[0]), answer[0], True, None
    if "problem" in record and "solution" in record:
        return str(record["problem"]), record["solution"], False, None
    return None, None, False, "row has neither 'conversations' nor 'problem'/'solution'"


def validate_row(record: Any, spec: DatasetSpec, line: int, sizes: dict[str, Any], require_box: bool = True,
                 check_method: bool = False) -> tuple[Optional[Sample], list[str]]:
    """check_method: the row's accuracy method must be one jsonl_accuracy computes (it is among the rewards)."""
    where = f"{spec.path}:{line}"
    if not isinstance(record, dict):
        return None, [f"{where}: row is not a JSON object"]
    problems = []
    method = record.get("accu_reward_method", spec.reward_method or DEFAULT_METHOD)
    wrong_method = method_problem(method) if check_method else None
    if wrong_method:
        problems.append(wrong_method)
    question, answer, placeholders_required, problem = _question_and_answer(record)
    if problem:
        problems.append(problem)
    paths, problem = row_image_paths(record, spec.image_root)
    if problem:
        problems.append(problem)
    image_sizes = []
    for path in paths:
        size, problem = sizes[path]
        if problem:
            problems.append(problem)
        image_sizes.append(size)
    if question is not None:
        count = question.count(PLACEHOLDER)
        if count != len(paths) and (placeholders_required or count):
            problems.append(f"{count} {PLACEHOLDER} placeholder(s) for {len(paths)} image(s)")
    box = parse_label(answer) if answer is not None else None
    if answer is not None and box is None and require_box:
        problems.append(f"cannot parse a box [x1, y1, x2, y2] from the answer {str(answer)[:80]!r} "
                        "(the iou reward needs one)")
    elif box is not None and not is_valid_box(box):
        problems.append(f"box {list(box)} has x2 <= x1 or y2 <= y1")
    if problems:
        return None, [f"{where}: {p}" for p in problems]
    solution = to_absolute(box, spec.box_space, image_sizes[0]) if box and image_sizes else box
    answer_text = answer if isinstance(answer, str) else json.dumps(answer)
    return Sample(where, record.get("id", where), paths, question, answer_text, solution, image_sizes, method), []


# --- the training dataset ------------------------------------------------------------------------------------


def prompt_messages(question: str, template: str) -> list[dict]:
    """One user turn: text with an image block at each <image>, or the images first when there are none."""
    return [{"role": "user", "content": content_parts(fill_template(template, question).strip())}]


def implicit_image_prefix(question: str, image_count: int) -> str:
    return question if PLACEHOLDER in question else PLACEHOLDER * image_count + question


def to_hf_dataset(samples: list[Sample], question_template: str):
    """A datasets.Dataset (TRL requires one) that opens images only when a row is read."""
    from datasets import Dataset

    rows = [
        {
            "question": implicit_image_prefix(s.question, len(s.image_paths)),
            "image_paths": s.image_paths,
            "answer": s.answer,
            "solution": list(s.solution) if s.solution else None,
            "image_size": list(s.image_sizes[0]) if s.image_sizes else None,
            "location": s.location,
            "accu_reward_method": s.reward_method,
        }
        for s in samples
    ]
    dataset = Dataset.from_list(rows)
    # partial, not a lambda: data loader workers may need to pickle the transform.
    return dataset.with_transform(functools.partial(_materialize, question_template=question_template))


def _materialize(batch: dict[str, list], question_template: str) -> dict[str, list]:
    return {
        "prompt": [prompt_messages(q, question_template) for q in batch["question"]],
        "images": [[load_rgb(p, where) for p in paths] for paths, where in zip(batch["image_paths"],
                                                                                 batch["location"])],
        "answer": batch["answer"],
        "solution": batch["solution"],
        "image_size": batch["image_size"],
        "location": batch["location"],
        "accu_reward_method": batch["accu_reward_method"],
    }
