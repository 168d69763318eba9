"""`vlmgrpo eval` for VLM-R1's other tasks (a config whose rewards include jsonl_accuracy): each row scored by its
accuracy method as training scores it (rewards/accuracy.py: a 0/1 verdict for mcq, yes_no, all_match, math, default
and llm, COCO AP for od_ap, od_ap50, map, odLength, the weighted score for weighted_sum), then the mean per data file
and overall. Pure but for the judge: completions in, predictions and a summary out; evaluate.py writes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from vlmgrpo.rewards.accuracy import make_jsonl_accuracy
from vlmgrpo.data.rec import Sample


@dataclass
class TaskPrediction:
    id: Any
    location: str  # file:line of the row
    completion: str
    method: str  # the row's accuracy method
    score: float

    @property
    def correct(self) -> bool:
        """Scored 1.0, to float rounding (COCO's AP of a perfect answer is the mean 0.9999999999999998)."""
        return self.score >= 1.0 - 1e-9

    def as_json(self) -> dict:
        return asdict(self)


def judge_tasks(samples: list[Sample], completions: list[str], judge=None) -> list[TaskPrediction]:
    """One call of the reward over every row, so that llm rows go to the judge together."""
    scores = make_jsonl_accuracy(judge)(prompts=[None] * len(samples), completions=completions,
                                        answer=[sample.answer for sample in samples],
                                        accu_reward_method=[sample.reward_method for sample in samples])
    return [TaskPrediction(sample.row_id, sample.location, completion, sample.reward_method, float(score))
            for sample, completion, score in zip(samples, completions, scores)]


def _mean(predictions: list[TaskPrediction]) -> dict:
    total = len(predictions)
    return {"accuracy": sum(p.score for p in predictions) / total if total else 0.0,
            "correct": sum(p.correct for p in predictions), "total": total,
            "methods": sorted({p.method for p in predictions})}


def summarise_tasks(predictions: list[TaskPrediction], settings: dict) -> dict:
    """eval.json: the mean score ("accuracy": the share right for 0/1 methods, the mean AP for the COCO ones) overall
    and per data file (in the order the files were given), the rows scoring 1.0, the methods, the settings."""
    files: dict[str, list[TaskPrediction]] = {}
    for prediction in predictions:
        files.setdefault(prediction.location.rsplit(":", 1)[0], []).append(prediction)
    return {**_mean(predictions), "per_file": {path: _mean(found) for path, found in files.items()},
            "settings": settings}
