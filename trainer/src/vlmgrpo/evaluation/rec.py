"""REC accuracy as VLM-R1 reports it: the share of answers whose box overlaps the ground truth with IoU >= 0.5,
per data file and overall. The answer's box is read exactly as the `iou` reward reads it (the first integer box in
the first <answer> block, in the model's answer space, scaled to original-image pixels) and compared with VLM-R1's
pixel IoU. Pure: completions in, predictions and a summary out; `evaluate.py` generates and writes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from vlmgrpo.boxes import pixel_iou, strict_answer_box
from vlmgrpo.data.rec import Sample
from vlmgrpo.rewards import ACCURACY_IOU, ResizeFunc, predicted_box


@dataclass
class Prediction:
    id: Any
    location: str  # file:line of the row
    completion: str
    box: Optional[list[float]]  # the answered box in original-image pixels; None when the answer holds none
    iou: float
    correct: bool

    def as_json(self) -> dict:
        return asdict(self)


def data_file(sample: Sample) -> str:
    return sample.location.rsplit(":", 1)[0]


def judge(sample: Sample, completion: str, space: str, resize: Optional[ResizeFunc]) -> Prediction:
    size = sample.image_sizes[0] if sample.image_sizes else None
    box = predicted_box(strict_answer_box(completion), space, size, resize)
    overlap = pixel_iou(box, sample.solution) if box is not None and sample.solution is not None else 0.0
    return Prediction(sample.row_id, sample.location, completion, list(box) if box is not None else None,
                      round(overlap, 6), overlap >= ACCURACY_IOU)


def _share(predictions: list[Prediction]) -> dict:
    correct = sum(p.correct for p in predictions)
    return {"accuracy": correct / len(predictions) if predictions else 0.0, "correct": correct,
            "total": len(predictions), "no_box": sum(p.box is None for p in predictions)}


def summarise(samples: list[Sample], predictions: list[Prediction], settings: dict) -> dict:
    """eval.json: accuracy overall and per data file (in the order the files were given), counts, settings."""
    by_file: dict[str, list[Prediction]] = {}
    for sample, prediction in zip(samples, predictions):
        by_file.setdefault(data_file(sample), []).append(prediction)
    overall = _share(predictions)
    return {"accuracy": overall["accuracy"], "correct": overall["correct"], "total": overall["total"],
            "no_box": overall["no_box"], "iou_threshold": ACCURACY_IOU,
            "per_file": {path: _share(found) for path, found in by_file.items()}, "settings": settings}
