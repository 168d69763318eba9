"""VLM-R1's `weighted_sum` accuracy for detection rows (grpo_jsonl.py's detection_score): the answer and the label are
each a ```json list of {"bbox_2d": [x1, y1, x2, y2], "label": ...}``` block, matched greedily by IoU; the score is
0.7 x the matched IoU per labelled box plus 0.3 x completeness (1 - (miss rate + false-alarm rate) / 2).

It gives VLM-R1's number wherever VLM-R1 gives one (tests/data/vlm_r1_answer_rewards.json), quirks included: the
texts are lower-cased first, so labels compare case-blind; a box that cannot be read overlaps nothing; the first
```json block counts. Where VLM-R1 raises instead (a label that is not JSON, the first matched answer box without a
text label), this scores the answer 0.0 or reads the missing label as "", and says so in the docstrings below.
"""

from __future__ import annotations

import json
import re
from typing import Any

from vlmgrpo.rewards.answer import normalized

JSON_BLOCK = re.compile(r"```json(.*?)```", re.DOTALL)  # a list of labelled boxes, as VLM-R1's detection rows hold it
IOU_THRESHOLD, POSITION_WEIGHT, LABEL_WEIGHT, COMPLETENESS_WEIGHT = 0.5, 0.7, 0.0, 0.3


def _boxes(text: str, *, strict: bool) -> list:
    """The items of the first ```json block of the (normalized) text; none when there is no block. An answer whose
    block is not JSON has none (VLM-R1); a label's raises there, and scores 0.0 here (strict: None)."""
    found = JSON_BLOCK.search(normalized(text))
    if not found or not found.group(1).strip():  # an empty block holds no boxes
        return []
    try:
        return list(json.loads(found.group(1).strip()))
    except Exception:  # noqa: BLE001 - VLM-R1 reads any failure (not JSON, not a list) as no boxes
        if strict:
            raise
        return []


def _overlap(answered: Any, wanted: Any) -> float:
    """VLM-R1's IoU of two items' bbox_2d (pixels x1..x2-1, its arithmetic order kept so floats agree to the bit); an
    item or box that cannot be read, or boxes of no area, overlap 0.0."""
    try:
        a, b = answered["bbox_2d"], wanted["bbox_2d"]
        left, top = max(a[0], b[0]), max(a[1], b[1])
        right, bottom = min(a[2] - 1, b[2] - 1), min(a[3] - 1, b[3] - 1)
        inter = (right - left + 1) * (bottom - top + 1) if left < right and top < bottom else 0
        return float(inter) / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
    except Exception:  # noqa: BLE001 - as VLM-R1: a box it cannot compute with overlaps nothing
        return 0.0


def _label(item: Any) -> str:
    return item["label"].lower()


def _greedy_matches(answered: list, wanted: list) -> tuple[list[tuple[float, bool]], int, int]:
    """(IoU and label agreement per match, answered boxes left, wanted boxes left): the pair of highest IoU first
    (the earliest on a tie), until none reaches the threshold. A match whose labels differ counts IoU 0."""
    table = [[_overlap(a, w) for w in wanted] for a in answered]
    free_answered, free_wanted = list(range(len(answered))), list(range(len(wanted)))
    matches: list[tuple[float, bool]] = []
    answered_label = ""  # VLM-R1 keeps the last label read when an answered box has none (and raises on the first)
    while free_answered and free_wanted:
        best, pair = -1.0, (-1, -1)
        for i in free_answered:
            for j in free_wanted:
                if table[i][j] > best:
                    best, pair = table[i][j], (i, j)
        if best < IOU_THRESHOLD:
            break
        try:
            answered_label = _label(answered[pair[0]])
        except Exception:  # noqa: BLE001 - no text label
            pass
        try:
            wanted_label = _label(wanted[pair[1]])
        except Exception:  # noqa: BLE001 - no text label
            wanted_label = ""
        same = answered_label == wanted_label
        matches.append((best if same else 0.0, same))
        free_answered.remove(pair[0])
        free_wanted.remove(pair[1])
    return matches, len(free_answered), len(free_wanted)


def detection_score(completion: str, label: str) -> float:
    """VLM-R1's detection_score of an answer against a label (both as the weighted_sum method passes them)."""
    answered = _boxes(completion, strict=False)
    try:
        wanted = _boxes(label, strict=True)
    except Exception:  # noqa: BLE001 - VLM-R1 raises on a label it cannot read; no answer can match it
        return 0.0
    if not wanted:
        return 0.0 if answered else 1.0
    if not answered:
        return 0.0
    matches, answered_left, wanted_left = _greedy_matches(answered, wanted)
    position = sum(score for score, _ in matches) / len(wanted) if matches else 0.0
    labels = sum(1.0 for _, same in matches if same) / len(wanted) if matches else 0.0
    completeness = 1.0 - (wanted_left / len(wanted) + answered_left / len(answered)) / 2.0
    return ((POSITION_WEIGHT * position + LABEL_WEIGHT * labels + COMPLETENESS_WEIGHT * completeness)
            / (POSITION_WEIGHT + LABEL_WEIGHT + COMPLETENESS_WEIGHT))


def weighted_sum_score(completion: str, label: str) -> float:
    """The weighted_sum method: both texts normalized (the last answer block, lower case); a label of "none" wants the
    answer "none"; else detection_score."""
    answer, wanted = normalized(completion), normalized(label)
    if wanted == "none":
        return 1.0 if answer == "none" else 0.0
    return detection_score(answer, wanted)
