"""VLM-R1 grpo_jsonl.py's accuracy reward, `jsonl_accuracy` here: each row is scored by its accuracy method, the row's
own `accu_reward_method`, else its data file's `reward_method` (the config's ':'-joined list, one per file, as VLM-R1's
--reward_method), else "default". The methods give VLM-R1's numbers (answer_rewards.py, detection_rewards.py,
math_rewards.py, od_rewards.py).

VLM-R1 names eleven methods. `llm`, which needs a judge model, is not in vlmgrpo yet: a row left to it is refused with
the rows, before any weights load, naming the row and what to use instead.
"""

from __future__ import annotations

from typing import Optional

from .answer_rewards import ALL_MATCH, MCQ, YES_NO, all_match_score, completion_text, mcq_score, yes_no_score
from .detection_rewards import weighted_sum_score
from .math_rewards import default_score, math_score
from .od_rewards import map_score, od_ap50_score, od_length_score, od_score

JSONL_ACCURACY = "jsonl_accuracy"
DEFAULT_METHOD = "default"
WEIGHTED_SUM, MATH = "weighted_sum", "math"
SCORES = {DEFAULT_METHOD: default_score, MCQ: mcq_score, YES_NO: yes_no_score, MATH: math_score,
          "map": map_score, WEIGHTED_SUM: weighted_sum_score, "od_ap": od_score, "od_ap50": od_ap50_score,
          "odLength": od_length_score, ALL_MATCH: all_match_score}
# VLM-R1's methods vlmgrpo does not compute yet, and what each needs.
NOT_YET = {"llm": "a judge model"}


def method_problem(method: object) -> Optional[str]:
    """Why a row cannot be scored by this method, or None."""
    if method in SCORES:
        return None
    available = ", ".join(SCORES)
    if method in NOT_YET:
        return (f"accu_reward_method {method!r} is VLM-R1's but not in vlmgrpo yet (it needs {NOT_YET[method]}); "
                f"give the row, or its file's reward_method, one of: {available}")
    return f"accu_reward_method {method!r} is not one of VLM-R1's; use one of: {available}"


def vlm_r1_solution(answer: object) -> str:
    """The label as grpo_jsonl.py hands it to a method: the gpt turn with its answer tags removed, stripped."""
    if not isinstance(answer, str):
        return str(answer)
    return answer.replace("<answer>", "").replace("</answer>", "").strip()


def jsonl_accuracy(prompts, completions, answer, accu_reward_method, **kwargs) -> list[float]:
    return [SCORES[method](completion_text(completion), vlm_r1_solution(label))
            for completion, label, method in zip(completions, answer, accu_reward_method)]


jsonl_accuracy.__name__ = JSONL_ACCURACY  # TRL logs rewards under the function's name
