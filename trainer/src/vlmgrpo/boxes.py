"""Parsing boxes out of model answers and dataset labels, coordinate spaces, IoU."""

from __future__ import annotations

import json
import re
from typing import Optional, Sequence

Box = tuple[float, float, float, float]

# Coordinate spaces a box can be written in.
ABSOLUTE = "absolute"  # pixels of the original image
NORM1000 = "norm1000"  # 0-1000 relative to the image (Qwen2-VL, many REC datasets)
RESIZED = "resized"  # pixels of the processor's resized input (Qwen2.5-VL answers)
BOX_SPACES = (ABSOLUTE, NORM1000, RESIZED)

_NUMBER = r"-?\d+(?:\.\d+)?"
_BOX_LIST = re.compile(rf"\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*,\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]")
# VLM-R1 reads only non-negative integers, written "[" right before the first and "]" right after the last,
# with whitespace allowed only after the commas: "[1, 2, 3, 4]" is a box, "[ 1, 2, 3, 4 ]" and "[1.5, 2, 3, 4]" are not.
INTEGER_BOX = r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\]"
_INTEGER_BOX = re.compile(INTEGER_BOX)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def first_box(text: str) -> Optional[Box]:
    """The first [x1, y1, x2, y2] in text, whether bare or inside Qwen's {"bbox_2d": [...]}."""
    match = _BOX_LIST.search(text)
    if match is None:
        return None
    return tuple(float(v) for v in match.groups())  # type: ignore[return-value]


def answer_box(text: str) -> Optional[Box]:
    """Box from the <answer> block when present, otherwise from the whole text."""
    answer = _ANSWER.search(text)
    return first_box(answer.group(1) if answer else text)


def strict_answer_box(text: str) -> Optional[Box]:
    """VLM-R1's reading: the first integer box inside the first <answer>...</answer>; nothing without that block."""
    answer = _ANSWER.search(text)
    box = _INTEGER_BOX.search(answer.group(1)) if answer else None
    return tuple(float(v) for v in box.groups()) if box else None  # type: ignore[return-value]


def parse_label(value) -> Optional[Box]:
    """A dataset's solution: a list of 4 numbers, or text holding one (JSON or <answer> block)."""
    if isinstance(value, (list, tuple)):
        if len(value) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return tuple(float(v) for v in value)  # type: ignore[return-value]
        if len(value) == 1:
            return parse_label(value[0])
        return None
    if isinstance(value, dict):
        return parse_label(value.get("bbox_2d"))
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return answer_box(value)
        if isinstance(decoded, (list, dict)):
            box = parse_label(decoded)
            if box is not None:
                return box
        return answer_box(value)
    return None


def is_valid_box(box: Box) -> bool:
    x1, y1, x2, y2 = box
    return x2 > x1 and y2 > y1


def to_absolute(box: Box, space: str, image_size: tuple[int, int], resized_size: Optional[tuple[int, int]] = None) -> Box:
    """Convert a box to original-image pixels. Sizes are (width, height)."""
    width, height = image_size
    if space == ABSOLUTE:
        return box
    if space == NORM1000:
        sx, sy = width / 1000.0, height / 1000.0
    elif space == RESIZED:
        if resized_size is None:
            raise ValueError("a box in the resized space needs the resized input size")
        sx, sy = width / resized_size[0], height / resized_size[1]
    else:
        raise ValueError(f"unknown box space {space!r}, allowed: {', '.join(BOX_SPACES)}")
    x1, y1, x2, y2 = box
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def pixel_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU with VLM-R1's pixel convention: a box covers pixels x1..x2-1, and the overlap counts only when it spans
    more than one pixel in each direction (so boxes that share a single pixel column score 0). Areas are not
    clamped, as there; a box with x2 <= x1 or y2 <= y1 never overlaps and scores 0."""
    overlap_width = min(a[2], b[2]) - max(a[0], b[0])
    overlap_height = min(a[3], b[3]) - max(a[1], b[1])
    if overlap_width <= 1 or overlap_height <= 1:
        return 0.0
    inter = overlap_width * overlap_height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix1, iy1 = max(a[0], b[0]), max(a[1], b[1])
    ix2, iy2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, ix2 - ix1) * max(0.0, iy2 - iy1)
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0
