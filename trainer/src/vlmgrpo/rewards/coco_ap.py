"""VLM-R1's COCO-AP accuracy methods for detection rows (grpo_jsonl.py's map_reward, od_reward, odLength_reward), on
pycocotools: the answer's and the label's last ```json list of {"bbox_2d": [x1, y1, x2, y2], "label": ...}``` are
scored as one synthetic 2048 x 2048 image, each label a category, every answered box with score 1.0.

- `map`: COCO AP (IoU 0.50:0.95) of the whole texts' lists; 1.0 when neither has a box, 0.0 when one has none.
- `od_ap`, `od_ap50`: the same (AP, or AP at IoU 0.5) on the answer's last <answer> block against the label; 0.0
  without an answer block; 1.0 when both say None.
- `odLength`: od_ap times gt/answered when the answer has more boxes than the label.

They give VLM-R1's number wherever it gives one (tests/data/vlm_r1_answer_rewards.json). Where it raises instead
they give 0.0 (a label list that is not JSON, a label box without a label or a readable box). The od methods read the
label's <answer> block (grpo_jsonl.py's solution column always has one), or the whole label when it has none.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from vlmgrpo.rewards.answer import ANSWER_BLOCK
from vlmgrpo.rewards.detection import JSON_BLOCK

CANVAS = 2048  # VLM-R1 scores every row as one image of this size
AP, AP50 = 0, 1  # COCOeval.stats: AP at IoU 0.50:0.95, AP at IoU 0.50


def _items(text: str, *, strict: bool) -> list:
    """The items of the text's last ```json block (none without one, or when it is empty). An answer's block that
    is not a JSON list holds none; a label's raises (strict)."""
    blocks = JSON_BLOCK.findall(text)
    body = blocks[-1].strip() if blocks else ""
    if strict:
        return list(json.loads(body)) if body else []
    try:
        return list(json.loads(body)) if blocks else []
    except Exception:  # noqa: BLE001 - VLM-R1 reads any failure as no boxes
        return []


def _geometry(box: Any) -> dict:
    width, height = box[2] - box[0], box[3] - box[1]
    return {"bbox": [box[0], box[1], width, height], "area": width * height}


def coco_ap(answered: list, wanted: list, stat: int) -> float:
    """COCOeval's stats[stat] for the answered items against the wanted ones. An answered item whose label no wanted
    item has, or whose box cannot be read, is left out; none left: 0.0."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    categories: dict = {}  # label -> category id, in order of first appearance among the wanted items
    annotations = []
    for number, item in enumerate(wanted, start=1):
        category = categories.setdefault(item["label"], len(categories))
        annotations.append({"id": number, "image_id": 0, "category_id": category, "iscrowd": 0,
                            **_geometry(item["bbox_2d"])})
    detections = []
    for item in answered:
        try:
            detections.append({"image_id": 0, "category_id": categories[item["label"]], "score": 1.0,
                               **_geometry(item["bbox_2d"])})
        except Exception:  # noqa: BLE001 - as VLM-R1: an answered box it cannot place is left out
            continue
    if not detections:
        return 0.0
    truth = COCO()
    truth.dataset = {"images": [{"id": 0, "width": CANVAS, "height": CANVAS, "file_name": "image_0.jpg"}],
                     "annotations": annotations,
                     "categories": [{"id": number, "name": name} for name, number in categories.items()]}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints each stage and the summary table
        truth.createIndex()
        evaluation = COCOeval(truth, truth.loadRes(detections), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return float(evaluation.stats[stat])


def map_score(completion: str, label: str, stat: int = AP, length: bool = False) -> float:
    answered = _items(completion, strict=False)
    try:
        wanted = _items(label, strict=True)
        if answered and wanted:
            score = coco_ap(answered, wanted, stat)
        else:
            score = 0.0 if answered or wanted else 1.0
    except Exception:  # noqa: BLE001 - VLM-R1 raises on a label it cannot read; no answer can match it
        return 0.0
    if length and len(answered) > len(wanted):
        score *= len(wanted) / len(answered)
    return score


def od_score(completion: str, label: str, stat: int = AP, length: bool = False) -> float:
    blocks = ANSWER_BLOCK.findall(completion)
    if not blocks:
        return 0.0
    answer = blocks[-1].strip()
    found = ANSWER_BLOCK.search(label)
    wanted = found.group(1).strip() if found else label.strip()
    if wanted == "None" and answer == "None":
        return 1.0
    return map_score(answer, wanted, stat, length)


def od_ap50_score(completion: str, label: str) -> float:
    return od_score(completion, label, AP50)


def od_length_score(completion: str, label: str) -> float:
    return od_score(completion, label, AP, length=True)
