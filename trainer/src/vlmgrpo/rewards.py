"""Reward functions with TRL's signature f(prompts, completions, **kwargs) -> list[float].

Dataset columns reach them as keyword lists: `solution` (box in original-image pixels) and `image_size`
((width, height) of the first image).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Callable, Optional

from .boxes import RESIZED, Box, answer_box, iou, to_absolute
from .errors import ConfigError

RewardFunc = Callable[..., list]
ResizeFunc = Callable[[int, int], tuple[int, int]]  # (width, height) -> processor input (width, height)

_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>(.*?)</answer>\s*$", re.DOTALL)


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


def predicted_box(text: str, space: str, image_size, resize: Optional[ResizeFunc]) -> Optional[Box]:
    box = answer_box(text)
    if box is None:
        return None
    resized = resize(*image_size) if space == RESIZED and resize else None
    return to_absolute(box, space, tuple(image_size), resized)


def make_iou_reward(answer_space: str, resize: Optional[ResizeFunc] = None, threshold: Optional[float] = None):
    """IoU of the first answered box with the label; with a threshold, 1.0 at or above it and 0.0 below."""

    def iou_reward(prompts, completions, solution, image_size, **kwargs) -> list[float]:
        rewards = []
        for completion, label, size in zip(completions, solution, image_size):
            box = predicted_box(completion_text(completion), answer_space, size, resize)
            score = iou(box, label) if box is not None else 0.0
            if threshold is not None:
                score = 1.0 if score >= threshold else 0.0
            rewards.append(score)
        return rewards

    iou_reward.__name__ = "iou"  # TRL logs rewards under the function's name
    return iou_reward


def format_reward(prompts, completions, **kwargs) -> list[float]:
    """1.0 for <think>...</think><answer>...</answer> whose answer holds a box, else 0.0."""
    rewards = []
    for completion in completions:
        match = _FORMAT.match(completion_text(completion))
        rewards.append(1.0 if match and answer_box(f"<answer>{match.group(1)}</answer>") else 0.0)
    return rewards


format_reward.__name__ = "format"


def load_custom(spec: str) -> RewardFunc:
    """module:function, or path/to/file.py:function."""
    module_name, sep, function_name = spec.rpartition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(f"reward '{spec}': expected iou, format, or module:function")
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
    return function


def build_rewards(names: list[str], answer_space: str, resize: Optional[ResizeFunc], threshold: Optional[float]):
    rewards = []
    for name in names:
        if name == "iou":
            rewards.append(make_iou_reward(answer_space, resize, threshold))
        elif name == "format":
            rewards.append(format_reward)
        else:
            rewards.append(load_custom(name))
    if not rewards:
        raise ConfigError("reward_funcs is empty: name at least one of iou, format, module:function")
    return rewards
