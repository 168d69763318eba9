"""VLM-R1 grpo_jsonl.py's accuracy reward, `jsonl_accuracy` here: each row is scored by its accuracy method, the row's
own `accu_reward_method`, else its data file's `reward_method` (the config's ':'-joined list, one per file, as VLM-R1's
--reward_method), else "default". The methods give VLM-R1's numbers (answer.py, detection.py,
math_answers.py, coco_ap.py).

VLM-R1 names eleven methods; `llm` asks a judge model (judge.py), which is checked before any weights load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from vlmgrpo.rewards.answer import ALL_MATCH, MCQ, YES_NO, all_match_score, completion_text, mcq_score, yes_no_score
from vlmgrpo.rewards.detection import weighted_sum_score
from vlmgrpo.rewards.math_answers import default_score, math_score
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards.coco_ap import map_score, od_ap50_score, od_length_score, od_score

if TYPE_CHECKING:
    from vlmgrpo.rewards.judge import Judge

JSONL_ACCURACY = "jsonl_accuracy"
DEFAULT_METHOD = "default"
WEIGHTED_SUM, MATH, LLM = "weighted_sum", "math", "llm"
SCORES = {DEFAULT_METHOD: default_score, MCQ: mcq_score, YES_NO: yes_no_score, MATH: math_score,
          "map": map_score, WEIGHTED_SUM: weighted_sum_score, "od_ap": od_score, "od_ap50": od_ap50_score,
          "odLength": od_length_score, ALL_MATCH: all_match_score}
METHODS = (*SCORES, LLM)  # every method VLM-R1's grpo_jsonl.py names


def method_problem(method: object) -> Optional[str]:
    """Why a row cannot be scored by this method, or None."""
    if method in METHODS:
        return None
    return f"accu_reward_method {method!r} is not one of VLM-R1's; use one of: {', '.join(METHODS)}"


def vlm_r1_solution(answer: object) -> str:
    """The label as grpo_jsonl.py hands it to a method: the gpt turn with its answer tags removed and stripped, then
    wrapped in "<answer> " and " </answer>" again (make_conversation_from_jsonl)."""
    text = answer.replace("<answer>", "").replace("</answer>", "").strip() if isinstance(answer, str) else str(answer)
    return f"<answer> {text} </answer>"


def make_jsonl_accuracy(judge: Optional["Judge"] = None):
    """The reward; the llm rows of each call are judged together, judge.concurrency at a time."""
    def jsonl_accuracy(prompts, completions, answer, accu_reward_method, **kwargs) -> list[float]:
        texts = [completion_text(completion) for completion in completions]
        labels = [vlm_r1_solution(label) for label in answer]
        scores = [SCORES[method](text, label) if method != LLM else 0.0
                  for text, label, method in zip(texts, labels, accu_reward_method)]
        judged = [index for index, method in enumerate(accu_reward_method) if method == LLM]
        if judged and judge is None:
            raise ConfigError("rows are scored by the llm method: set judge_url and judge_model")
        if judged:
            invalid = judge.tally.calls - judge.tally.valid
            verdicts = judge.scores([texts[i] for i in judged], [labels[i] for i in judged])
            for index, score in zip(judged, verdicts):
                scores[index] = score
            if "log_metric" in kwargs:  # TRL's GRPOTrainer passes it: the count reaches metrics.jsonl and /metrics
                kwargs["log_metric"]("judge_invalid", judge.tally.calls - judge.tally.valid - invalid)
        return scores

    jsonl_accuracy.__name__ = JSONL_ACCURACY  # TRL logs rewards under the function's name
    return jsonl_accuracy


jsonl_accuracy = make_jsonl_accuracy()
