"""Reward functions with TRL's signature f(prompts, completions, **kwargs) -> list[float].

Dataset columns reach them as keyword lists: `solution` (box in original-image pixels) and `image_size`
((width, height) of the first image).
A reward knows nothing of the config, the data reader, the run or the model: this package imports only
the leaves boxes and errors.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import importlib.util
import re
from pathlib import Path
from typing import Callable, Optional

from vlmgrpo.rewards.accuracy import JSONL_ACCURACY, make_jsonl_accuracy
from vlmgrpo.rewards.answer import ANSWER_REWARD_FUNCS, ANSWER_REWARDS, FORMAT_ANSWER, completion_text
from vlmgrpo.boxes import INTEGER_BOX, RESIZED, Box, answer_box, iou, pixel_iou, strict_answer_box, to_absolute
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards.shaping import LENGTH, REPETITION, make_length_reward, repetition_reward

RewardFunc = Callable[..., list]
ResizeFunc = Callable[[int, int], tuple[int, int]]  # (width, height) -> processor input (width, height)

# VLM-R1's REC rewards are the defaults; the *_lenient variants read any box anywhere (floats, negative numbers,
# inner spaces, no <answer> block) and use the plain continuous IoU.
IOU, FORMAT, IOU_LENIENT, FORMAT_LENIENT = "iou", "format", "iou_lenient", "format_lenient"
# VLM-R1's rewards for text answers (answer.py): mcq, yes_no, all_match and format_answer; and its
# grpo_jsonl.py accuracy, each row scored by its own method (accuracy.py).
BUILTIN_REWARDS = (IOU, FORMAT, IOU_LENIENT, FORMAT_LENIENT, *ANSWER_REWARDS, JSONL_ACCURACY, LENGTH, REPETITION)
BOX_REWARDS = (IOU, IOU_LENIENT)  # these need a box in every row's answer
# VLM-R1's --reward_funcs names, as its grpo_jsonl.py reads them: with is_reward_customized_from_vlm_module its model
# module's rewards (REC on Qwen and InternVL: IoU and the box format), without it (false, VLM-R1's default) its own
# registry (each row's accuracy method, the think/answer format). Unset reads `accuracy` as VLM-R1's default does,
# but `format` stays this trainer's REC format: it is in the default reward_funcs [iou, format] and every REC recipe.
REWARD_ALIASES = {True: {"accuracy": IOU}, False: {"accuracy": JSONL_ACCURACY, FORMAT: FORMAT_ANSWER},
                  None: {"accuracy": JSONL_ACCURACY}}


def vlm_r1_reward(name: str, customized: Optional[bool]) -> str:
    """The reward a VLM-R1 name means under is_reward_customized_from_vlm_module (true, false or unset)."""
    return REWARD_ALIASES[customized].get(name, name)


def reward_meaning(name: str, reward_method: Optional[str]) -> str:
    """What a built-in reward scores, in words, for the start line and --print-config; "" for any other."""
    if name == JSONL_ACCURACY:
        fallback = f"reward_method {reward_method}" if reward_method else "its data entry's reward_method"
        return f"per row (accu_reward_method, else {fallback}, else default)"
    return {IOU: "IoU of the answered box with the label (the REC reward of VLM-R1's Qwen and InternVL modules)",
            FORMAT: "REC's format: <think>...</think> <answer>{...[x1, y1, x2, y2]...}</answer>",
            FORMAT_ANSWER: "<think>...</think> <answer>...</answer>"}.get(name, "")


# REC accuracy (VLM-R1's evaluation): 1 when the answered box has IoU >= 0.5 with the label. `train` adds it with
# weight 0 when it evaluates, so eval_rewards/rec_accuracy is the validation split's REC accuracy.
REC_ACCURACY, ACCURACY_IOU = "rec_accuracy", 0.5

# format (VLM-R1): a <think>...</think> block, then (whitespace and) <answer>, after which a "{", an integer box,
# a "}" and "</answer>" follow in that order. Text before <think> or after </answer> is allowed.
_REASONING_THEN_ANSWER = re.compile(r"<think>.*?</think>\s*<answer>", re.DOTALL)
_BRACED_BOX_THEN_CLOSE = re.compile(r"\{.*?" + INTEGER_BOX + r".*?\}.*?</answer>", re.DOTALL)
# format_lenient: exactly <think>...</think><answer>...</answer>, nothing around it, any box in the answer.
_LENIENT_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>(.*?)</answer>\s*$", re.DOTALL)


def predicted_box(box: Optional[Box], space: str, image_size, resize: Optional[ResizeFunc]) -> Optional[Box]:
    """The answered box in original-image pixels; a text-only row has no image to scale by, so it stays as read."""
    if box is None or image_size is None:
        return box
    resized = resize(*image_size) if space == RESIZED and resize else None
    return to_absolute(box, space, tuple(image_size), resized)


def make_iou_reward(answer_space: str, resize: Optional[ResizeFunc] = None, threshold: Optional[float] = None,
                    lenient: bool = False):
    """IoU of the answered box with the label; with a threshold, 1.0 at or above it and 0.0 below.

    Default (VLM-R1): the first integer box in the first <answer> block, VLM-R1's pixel IoU. Lenient: the first
    box of any form in the answer block, or in the whole text when there is none, and the continuous IoU.
    """
    read, overlap = (answer_box, iou) if lenient else (strict_answer_box, pixel_iou)

    def iou_reward(prompts, completions, solution, image_size, **kwargs) -> list[float]:
        rewards = []
        for completion, label, size in zip(completions, solution, image_size):
            box = predicted_box(read(completion_text(completion)), answer_space, size, resize)
            score = overlap(box, label) if box is not None else 0.0
            if threshold is not None:
                score = 1.0 if score >= threshold else 0.0
            rewards.append(score)
        return rewards

    iou_reward.__name__ = IOU_LENIENT if lenient else IOU  # TRL logs rewards under the function's name
    return iou_reward


def make_rec_accuracy(answer_space: str, resize: Optional[ResizeFunc] = None):
    reward = make_iou_reward(answer_space, resize, threshold=ACCURACY_IOU)
    reward.__name__ = REC_ACCURACY
    return reward


def is_vlm_r1_format(text: str) -> bool:
    opening = _REASONING_THEN_ANSWER.search(text)
    return opening is not None and _BRACED_BOX_THEN_CLOSE.search(text, opening.end()) is not None


def is_lenient_format(text: str) -> bool:
    match = _LENIENT_FORMAT.match(text)
    return match is not None and answer_box(f"<answer>{match.group(1)}</answer>") is not None


def format_reward(prompts, completions, **kwargs) -> list[float]:
    """VLM-R1's REC format: <think>...</think> <answer>...{...[x1, y1, x2, y2]...}...</answer>, integers only."""
    return [1.0 if is_vlm_r1_format(completion_text(c)) else 0.0 for c in completions]


def format_lenient_reward(prompts, completions, **kwargs) -> list[float]:
    """Only <think>...</think><answer>...</answer> (whitespace around tags allowed), any box in the answer."""
    return [1.0 if is_lenient_format(completion_text(c)) else 0.0 for c in completions]


format_reward.__name__ = FORMAT
format_lenient_reward.__name__ = FORMAT_LENIENT


def load_custom(spec: str) -> RewardFunc:
    """module:function, or path/to/file.py:function."""
    module_name, sep, function_name = spec.rpartition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(f"reward '{spec}': expected {', '.join(BUILTIN_REWARDS)}, or module:function")
    try:
        if module_name.endswith(".py"):
            location = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
            if location is None or not Path(module_name).is_file():
                raise ImportError(f"no file {module_name}")
            module = importlib.util.module_from_spec(location)
            location.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"reward '{spec}': cannot import {module_name}: {exc}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(f"reward '{spec}': {module_name} has no function {function_name}")
    if not takes_reward_arguments(function):
        raise ConfigError(f"reward '{spec}': {module_name}.{function_name} is not a reward function: TRL calls one "
                          "as f(prompts=..., completions=..., **the row's columns) and takes a list of floats back")
    return function


def takes_reward_arguments(function) -> bool:
    """Whether TRL's call of a reward, f(prompts=..., completions=..., **columns), binds to the function's signature
    (os:system passed the preflight, then failed at step 1 with an 80-line traceback)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: not one of ours
        return False
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters)
    positional_only = any(p.kind == p.POSITIONAL_ONLY and p.default is p.empty for p in parameters)
    # Other required names (a row's column: solution) are TRL's to pass, from the data
    return (takes_any or {"prompts", "completions"} <= named) and not positional_only


def check_reward_names(names: list[str], source: str) -> dict[str, RewardFunc]:
    """Resolve every reward before any model loads: built-in names, or importable custom functions (returned)."""
    if not names:
        raise ConfigError(f"{source}: key 'reward_funcs' is empty: name at least one of "
                          f"{', '.join(BUILTIN_REWARDS)} or module:function")
    custom = {}
    for name in names:
        if name in BUILTIN_REWARDS:
            continue
        if ":" not in name:
            close = difflib.get_close_matches(name, BUILTIN_REWARDS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{source}: key 'reward_funcs': unknown reward '{name}'{hint}; use one of "
                              f"{', '.join(BUILTIN_REWARDS)}, or module:function / path/to/file.py:function")
        custom[name] = load_custom(name)
    return custom


def reward_functions(config) -> dict[str, RewardFunc]:
    """The rewards part of the run plan (training/plan.py): every reward name known or importable, one weight for each;
    the custom functions by name, imported (the built-in ones are made with the model: build_rewards)."""
    names = config.reward.reward_funcs
    custom = check_reward_names(names, config.where("reward_funcs"))
    weights = config.trl.reward_weights
    if weights is not None and len(weights) != len(names):
        raise ConfigError(f"{config.where('reward_weights')}: key 'reward_weights': {len(weights)} weights for "
                          f"{len(names)} reward_funcs {names}")
    return custom


def build_rewards(names: list[str], answer_space: str, resize: Optional[ResizeFunc], threshold: Optional[float],
                  judge=None, tokenizer=None, custom: Optional[dict[str, RewardFunc]] = None,
                  rec_accuracy: bool = False):
    """judge: the llm method's (judge.Judge), for jsonl_accuracy; tokenizer: the model's, for length; custom: the
    custom functions check_reward_names resolved (a run plan's), else resolved here; rec_accuracy: REC accuracy
    after them (make_rec_accuracy), which the caller weighs 0."""
    if custom is None:
        custom = check_reward_names(names, "config")
    factories = {
        IOU: lambda: make_iou_reward(answer_space, resize, threshold),
        IOU_LENIENT: lambda: make_iou_reward(answer_space, resize, threshold, lenient=True),
        FORMAT: lambda: format_reward,
        FORMAT_LENIENT: lambda: format_lenient_reward,
        JSONL_ACCURACY: lambda: make_jsonl_accuracy(judge),
        LENGTH: lambda: make_length_reward(tokenizer),
        REPETITION: lambda: repetition_reward,
    }
    factories.update({name: (lambda function=function: function) for name, function in ANSWER_REWARD_FUNCS.items()})
    built = [factories[name]() if name in factories else custom[name] for name in names]
    return built + ([make_rec_accuracy(answer_space, resize)] if rec_accuracy else [])
