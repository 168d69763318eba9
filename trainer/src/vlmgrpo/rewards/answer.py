"""VLM-R1's answer rewards for tasks whose answer is text, not a box (its grpo_jsonl.py `accu_reward_method`s mcq,
yes_no and all_match, and its generic format reward), with TRL's signature. They read the row's answer (the `answer`
column: the gpt turn, or `solution`) and give the number VLM-R1 gives on the same completion, quirks included:
tests/data/vlm_r1_answer_rewards.json holds VLM-R1's own values, with the commit they were computed at.
"""

from __future__ import annotations

import re
from typing import Optional

MCQ, YES_NO, ALL_MATCH, FORMAT_ANSWER = "mcq", "yes_no", "all_match", "format_answer"
ANSWER_REWARDS = (MCQ, YES_NO, ALL_MATCH, FORMAT_ANSWER)

_TAGGED = re.compile(r"<answer>(.*?)</answer>")  # a label's answer block: one line, as VLM-R1 reads labels
ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # a completion's, over several lines
# A choice: one capital letter with no letter before it, then punctuation or the end of the text.
_CHOICE = re.compile(r"(?<![A-Z])([A-Z])(?=[\.\,\?\!\:\;]|$)")
# Words near a choice that make it the likelier answer when a text names several (VLM-R1's list, Chinese included).
_ANSWER_WORDS = ("答案", "选择", "正确", "是", "对", "ANSWER", "CORRECT", "CHOOSE", "SELECT", "RIGHT",
                 "认为", "应该", "觉得", "THINK", "BELIEVE", "SHOULD")
_YES_OR_NO = re.compile(r"(yes|no)")
_FORMAT = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)


def completion_text(completion) -> str:
    """TRL passes a string for plain prompts and a list of messages for conversational ones."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "")
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content if isinstance(block, dict))
        parts.append(content or "")
    return "".join(parts)


def label_answer(label: str) -> str:
    """The label's first answer block on one line, else the whole label; stripped (VLM-R1 reads labels so)."""
    found = _TAGGED.search(label)
    return found.group(1).strip() if found else label.strip()


def _first_answer(text: str) -> str:
    found = ANSWER_BLOCK.search(text)
    return found.group(1).strip() if found else text.strip()


def last_answer(text: str) -> str:
    """The completion's last answer block, over lines, else the whole text; stripped."""
    blocks = ANSWER_BLOCK.findall(text)
    return blocks[-1].strip() if blocks else text.strip()


def choice_of(text: str) -> Optional[str]:
    """The letter a text answers with: the only one it names, else the one scored highest by answer words within 20
    characters, being in the last 30% of the text (2) and punctuation right after it (1); the first on a tie."""
    text = re.sub(r"\s+", " ", text.upper())
    named = _CHOICE.findall(text)
    if len(named) <= 1:
        return named[0] if named else None
    scores = dict.fromkeys(named, 0)
    for letter in named:  # a letter named twice is scored twice (VLM-R1's rule)
        at = text.find(letter)  # its first place in the text, as a letter anywhere (VLM-R1's rule)
        near = text[max(0, at - 20):at + 20]
        scores[letter] += (sum(word in near for word in _ANSWER_WORDS) + (2 if at > len(text) * 0.7 else 0)
                           + (1 if at < len(text) - 1 and text[at + 1] in "。.!！,，" else 0))
    return max(scores, key=scores.get)


def mcq_score(completion: str, label: str) -> float:
    """1.0 when the completion's answer names the label's choice. A label naming no letter is compared whole, tags and
    all, which no extracted letter equals: 0.0 (VLM-R1)."""
    wanted = choice_of(label_answer(label))
    answered = choice_of(_first_answer(completion))
    return 1.0 if answered and answered == (wanted or label.strip()) else 0.0


def yes_no_score(completion: str, label: str) -> float:
    """1.0 when the first "yes" or "no" in the completion's answer is the label's (anywhere in a word: "nobody" says
    no); neither having one is a match too (VLM-R1)."""
    def said(text: str) -> str:
        found = _YES_OR_NO.search(text)
        return found.group(1) if found else ""
    return 1.0 if said(_first_answer(completion.lower())) == said(label_answer(label.lower())) else 0.0


def normalized(text: str) -> str:
    """The last answer block (or the whole text), line breaks joined with a space unless one is there already,
    without outer spaces and trailing dots, in lower case (VLM-R1's clean_text)."""
    blocks = ANSWER_BLOCK.findall(text)
    if blocks:
        text = blocks[-1]
    for brk in ("\n", "\r"):
        text = re.sub(r"(?<=\s)" + re.escape(brk), "", text)
        text = re.sub(r"(?<!\s)" + re.escape(brk), " ", text)
    return text.strip().rstrip(".").lower()


def all_match_score(completion: str, label: str) -> float:
    return 1.0 if normalized(completion) == normalized(label) else 0.0


def _answer_reward(name: str, score):
    def reward(prompts, completions, answer, **kwargs) -> list[float]:
        return [score(completion_text(c), "" if label is None else str(label)) for c, label in zip(completions, answer)]
    reward.__name__ = name  # TRL logs rewards under the function's name
    return reward


def format_answer_reward(prompts, completions, **kwargs) -> list[float]:
    """VLM-R1's format for text answers: exactly <think>...</think>, whitespace, <answer>...</answer>."""
    return [1.0 if _FORMAT.fullmatch(completion_text(c)) else 0.0 for c in completions]


format_answer_reward.__name__ = FORMAT_ANSWER
ANSWER_REWARD_FUNCS = {MCQ: _answer_reward(MCQ, mcq_score), YES_NO: _answer_reward(YES_NO, yes_no_score),
                       ALL_MATCH: _answer_reward(ALL_MATCH, all_match_score), FORMAT_ANSWER: format_answer_reward}
