"""VLM-R1's shaping rewards (grpo_jsonl.py's reward_funcs `length` and `repetition`), with TRL's signature.

- `length` (its cosine_rewards): 1.0 - 0.25 x (1 - cos(pi x tokens / 1024)), from 1.0 for an empty completion down to
  0.5 at 1024 tokens of the model's tokenizer. VLM-R1 computes the detection accuracy first and then sets it to 1.0
  before use, so only the length counts; here the accuracy is not computed (where VLM-R1 raises on a label that is
  not JSON, this still gives the length's number).
- `repetition`: minus the share of repeated items in the completion's JSON list of boxes (``` json block, else any
  ``` block, else a bare [{"bbox_2d": ..., "label": ...}] list; repaired by json-repair when it does not parse), or
  else of repeated 6-word sequences in the text; 0.0 for an empty text or one of under six words.

Both give VLM-R1's value wherever it gives one (tests/data/vlm_r1_answer_rewards.json).
"""

from __future__ import annotations

import json
import math
import re

from vlmgrpo.rewards.answer import completion_text
from vlmgrpo.rewards.detection import JSON_BLOCK

LENGTH, REPETITION = "length", "repetition"
_ANY_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)
_BOX_LIST = re.compile(r'\[\s*{.*?"bbox_2d".*?"label".*?}\s*\]', re.DOTALL)
COSINE_TOKENS, WORDS = 1024, 6


def length_score(tokens: int) -> float:
    return 1.0 - (1.0 - 0.5) * (1 - math.cos(tokens * math.pi / COSINE_TOKENS)) / 2


def make_length_reward(tokenizer):
    """tokenizer: the model's; the completion's text is encoded again, as VLM-R1 counts it."""
    def length(prompts, completions, **kwargs) -> list[float]:
        return [length_score(len(tokenizer.encode(completion_text(c)))) for c in completions]

    length.__name__ = LENGTH  # TRL logs rewards under the function's name
    return length


def _box_text(text: str):
    found = JSON_BLOCK.search(text)
    if found:
        return found.group(1).strip()
    found = _ANY_BLOCK.search(text)
    if found and found.group(1).strip():
        return found.group(1).strip()
    found = _BOX_LIST.search(text)
    return found.group(0) if found else None


def _parsed(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        from json_repair import repair_json

        try:
            return json.loads(repair_json(text))
        except Exception:  # noqa: BLE001 - VLM-R1 then reads the completion as plain text
            return None


def _repeated_share(items: list) -> float:
    return (1 - len(set(items)) / len(items)) * -1.0


def _box_key(item) -> "str | None":
    """f"{box}_{label}": items repeat as VLM-R1's strings of them do ([1, 2, 3, 4] and [1.0, ...] differ). An item
    without both keys is left out; one that is no mapping, where VLM-R1 raises, too."""
    try:
        return f"{item['bbox_2d']}_{item['label']}" if "bbox_2d" in item and "label" in item else None
    except TypeError:
        return None


def repetition_score(text: str) -> float:
    if text == "":
        return 0.0
    boxes = _box_text(text)
    data = _parsed(boxes) if boxes else None
    if data and isinstance(data, list):
        items = [key for key in map(_box_key, data) if key is not None]
        return _repeated_share(items) if items else 0.0
    words = text.lower().split()
    if len(words) < WORDS:
        return 0.0
    return _repeated_share(list(zip(*[words[i:] for i in range(WORDS)])))


def repetition_reward(prompts, completions, **kwargs) -> list[float]:
    return [repetition_score(completion_text(c)) for c in completions]


repetition_reward.__name__ = REPETITION
