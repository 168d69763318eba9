"""VLM-R1's `default` and `math` accuracy methods (grpo_jsonl.py's default_accuracy_reward and math_reward, with its
utils/math.py), on the libraries it uses: math-verify's parse and verify, and Levenshtein's ratio.

`default`: 1.0 when math-verify finds the answer block equal to the label; else, for a label with a digit, 1.0 or 0.0
when both read as the same or another float (the Levenshtein ratio of the normalized texts when either does not);
for a label naming a choice letter, whether the answer names the same; for any other label, the ratio.
`math`: 1.0 when the normalized texts are equal, when math-verify finds them equal, or when the last \\boxed{} of the
answer equals the label after the MATH data set's string normalization (Hendrycks et al.); else 0.0.

Both give VLM-R1's number wherever it gives one (tests/data/vlm_r1_answer_rewards.json). Where VLM-R1 raises (math's
verify on a text math-verify cannot handle), `math` goes on to the \\boxed{} comparison instead.
"""

from __future__ import annotations

import re
from typing import Optional

from vlmgrpo.rewards.answer import choice_of, label_answer, last_answer, normalized

_DIGIT = re.compile(r"\d")


def _verified(answer: str, label: str) -> bool:
    """math-verify's verdict; a text it cannot parse or compare is not verified."""
    from math_verify import parse, verify

    try:
        return float(verify(parse(answer), parse(label))) > 0
    except Exception:  # noqa: BLE001 - VLM-R1 reads any failure as "not verified"
        return False


def _same_number(answer: str, label: str) -> Optional[float]:
    """1.0 or 0.0 when both normalized texts are floats (Python's float(): "1e3", " 7", "1_000" included), else None."""
    try:
        return 1.0 if float(normalized(answer)) == float(normalized(label)) else 0.0
    except ValueError:
        return None


def _similarity(answer: str, label: str) -> float:
    from Levenshtein import ratio

    return ratio(normalized(answer), normalized(label))


def default_score(completion: str, label: str) -> float:
    wanted, answer = label_answer(label), last_answer(completion)
    if _verified(answer, wanted):
        return 1.0
    if _DIGIT.search(wanted):
        same = _same_number(answer, wanted)
        return same if same is not None else _similarity(answer, wanted)
    choice = choice_of(wanted)
    if choice:
        return 1.0 if choice_of(answer) == choice else 0.0
    return _similarity(answer, wanted)


def math_score(completion: str, label: str) -> float:
    answer, wanted = normalized(completion), normalized(label)
    if answer == wanted or _verified(answer, wanted):
        return 1.0
    try:
        boxed = last_boxed(answer)
        return 1.0 if equal_after_normalizing(unboxed(boxed) if boxed is not None else answer, wanted) else 0.0
    except (AssertionError, IndexError):  # a \\fbox, or a \\boxed without its braces: VLM-R1 scores 0.0
        return 0.0


# --- the \boxed{} answer and the MATH data set's normalization -------------------------------------------------


def last_boxed(text: str) -> Optional[str]:
    """The last `\\boxed ...` up to a `$`, or else the last `\\boxed{...}` (or `\\fbox{...}`) with balanced braces."""
    if "\\boxed " in text:
        return "\\boxed " + text.split("\\boxed ")[-1].split("$")[0]
    start = text.rfind("\\boxed")
    if start < 0:
        start = text.rfind("\\fbox")
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if text[end] == "}" and depth == 0:
            return text[start:end + 1]
    return None


def unboxed(boxed: str) -> str:
    """What a \\boxed holds; AssertionError for anything else (a \\fbox), as VLM-R1 asserts."""
    if "\\boxed " in boxed:
        assert boxed.startswith("\\boxed ")
        return boxed[len("\\boxed "):]
    assert boxed.startswith("\\boxed{") and boxed.endswith("}")
    return boxed[len("\\boxed{"):-1]


def equal_after_normalizing(first: str, second: str) -> bool:
    """Equal once normalized; when either cannot be (the normalization raises), equal as written."""
    try:
        return normalize_math(first) == normalize_math(second)
    except Exception:  # noqa: BLE001 - VLM-R1 compares the raw texts then
        return first == second


# Removed or replaced in this order before the structural fixes.
_REPLACEMENTS = (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac"), ("\\left", ""),
                 ("\\right", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\$", ""))


def normalize_math(text: str) -> str:
    """The MATH data set's answer normalization as VLM-R1 applies it. Raises (AssertionError, IndexError,
    ValueError) on the texts where VLM-R1's raises: two `\\text{ ` units, a bare `\\sqrt` or `\\frac` at the end,
    an `a/b` whose parts are not integers."""
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    if "\\text{ " in text:  # units on the right
        before, *after = text.split("\\text{ ")
        assert len(after) == 1
        text = before
    text = text.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text.startswith("."):
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 3": the value
        text = sides[1]
    text = _braced_sqrt(text).replace(" ", "")
    text = _braced_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_as_frac(text)


def _braced_sqrt(text: str) -> str:
    """\\sqrt3 -> \\sqrt{3}."""
    head, *parts = text.split("\\sqrt")
    return head + "".join("\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:]) for part in parts)


def _braced_fracs(text: str) -> str:
    """\\frac12 -> \\frac{1}{2}, \\frac1{2} -> \\frac{1}{2}; the text as it was when a \\frac has one character."""
    head, *parts = text.split("\\frac")
    out = [head]
    for part in parts:
        if part[0] == "{":
            out.append("\\frac" + part)
        elif len(part) < 2:
            return text
        elif part[1] != "{":
            out.append("\\frac{" + part[0] + "}{" + part[1] + "}" + part[2:])
        else:
            out.append("\\frac{" + part[0] + "}" + part[1:])
    return "".join(out)


def _slash_as_frac(text: str) -> str:
    """"3/4" -> \\frac{3}{4}; ValueError when a text with one slash is not two integers."""
    parts = text.split("/")
    if len(parts) != 2:
        return text
    numerator, denominator = int(parts[0]), int(parts[1])
    return f"\\frac{{{numerator}}}{{{denominator}}}" if text == f"{numerator}/{denominator}" else text
