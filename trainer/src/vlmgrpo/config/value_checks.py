"""The checks of a built configuration's values that its types do not express: choices, ranges, the question
template. Each failure is one ConfigError line naming where the key was set."""

from __future__ import annotations

import dataclasses
import math

from vlmgrpo.errors import ConfigError
from vlmgrpo.config.sections import parse_profile_steps
from vlmgrpo.config.template import QUESTION_PLACEHOLDERS
from vlmgrpo.rewards.judge import credentials_problem


def check_choices(config) -> None:
    """Keys whose field metadata lists its choices (TRL's way: dtype, bnb_4bit_quant_type; ours: box spaces, ...)."""
    for section in (config.model, config.data, config.reward, config.run):
        if section is None:
            continue
        for f in dataclasses.fields(section):
            allowed = f.metadata.get("choices")
            value = getattr(section, f.name)
            if allowed and value is not None and value not in allowed:  # None: an optional key left unset
                raise ConfigError(f"{config.where(f.name)}: key '{f.name}': {value!r} is not one of: "
                                  f"{', '.join(allowed)}")


# key -> (lowest allowed, whether the lowest is excluded, why); None values (unset) are not checked.
RANGES: dict[str, tuple[float, bool, str]] = {
    "num_generations": (2, False, "GRPO compares at least 2 completions of each prompt"),
    "per_device_train_batch_size": (1, False, "completions per device and step"),
    "per_device_eval_batch_size": (1, False, "completions per device in evaluation"),
    "gradient_accumulation_steps": (1, False, "steps"),
    "max_completion_length": (1, False, "tokens"),
    "max_length": (1, False, "tokens"),
    "learning_rate": (0, True, "a step size"),
    "num_train_epochs": (0, True, "epochs"),
    "save_steps": (0, True, "steps, or a fraction of the run below 1"),
    "logging_steps": (0, True, "steps, or a fraction of the run below 1"),
    "num_iterations": (1, False, "updates per generation"),
    "beta": (0, False, "the KL coefficient"),
    "epsilon": (0, False, "the clipping range"),
    "temperature": (0, True, "the sampling temperature"),
    "top_k": (0, False, "0 turns top-k off"),
    "top_p": (0, True, "a probability mass"),
    "val_split_ratio": (0, False, "a fraction of the rows"),
    "min_pixels": (1, False, "pixels"),
    "max_pixels": (1, False, "pixels"),
    "lora_r": (1, False, "the LoRA rank"),
    "nproc_per_node": (1, False, "processes"),
    "nnodes": (1, False, "hosts"),
    "node_rank": (0, False, "the host's index"),
    "master_port": (1, False, "a TCP port"),
    "zero_reward_patience": (1, False, "logged steps"),
    "shutdown_timeout": (1, False, "seconds"),
    "max_restarts": (0, False, "restarts"),
    "metrics_port": (1, False, "a TCP port"),
    "health_stall_factor": (0, True, "times the median step time"),
    "health_stall_min_s": (0, False, "seconds"),
    "health_startup_s": (0, False, "seconds"),
    "vllm_gpu_memory_utilization": (0, True, "the fraction of each GPU's memory vLLM takes"),
    "vllm_tensor_parallel_size": (1, False, "GPUs per vLLM engine"),
    "vllm_server_port": (1, False, "a TCP port"),
    "judge_timeout": (0, True, "seconds one judge call may take"),
    "judge_max_retries": (0, False, "retries"),
    "judge_concurrency": (1, False, "judge calls in flight at once"),
    "judge_max_tokens": (1, False, "tokens"),
    "seed": (0, False, "numpy's random generator takes seeds from 0 to 2**32 - 1"),
    "data_seed": (0, False, "numpy's random generator takes seeds from 0 to 2**32 - 1"),
}
# key -> (highest allowed, whether the highest is excluded)
UPPER: dict[str, tuple[float, bool]] = {"top_p": (1, False), "val_split_ratio": (1, True),
                                        "seed": (2**32 - 1, False), "data_seed": (2**32 - 1, False),
                                        "master_port": (65535, False), "metrics_port": (65535, False),
                                        "vllm_gpu_memory_utilization": (1, False), "vllm_server_port": (65535, False)}


def _number(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def _bounds_problem(key: str, value) -> str | None:
    low, open_low, why = RANGES[key]
    high, open_high = UPPER.get(key, (None, False))
    too_low = value <= low if open_low else value < low
    too_high = high is not None and (value >= high if open_high else value > high)
    if not (too_low or too_high):
        return None
    bounds = f"{'>' if open_low else '>='} {_number(low)}"
    if high is not None:
        bounds += f" and {'<' if open_high else '<='} {_number(high)}"
    return f"must be {bounds} ({why}), got {value}"


def _not_finite(value) -> bool:
    """A float that is infinite or not a number, or a list holding one (reward_weights)."""
    if isinstance(value, (list, tuple)):
        return any(_not_finite(item) for item in value)
    return isinstance(value, float) and not math.isfinite(value)


def non_finite(values: dict):
    """One rule for numbers: every float a configuration or flag sets is finite. A NaN passes every range check (each
    comparison with it is false) and an infinity most: `learning_rate: .inf` saved a checkpoint of NaN weights, a
    `judge_timeout: .inf` never ended. No key documents infinity as a value."""
    for key, value in values.items():
        if _not_finite(value):
            yield key, value


def check_ranges(config) -> None:
    values = config.flat()
    for key, value in non_finite(values):
        what = "finite numbers" if isinstance(value, list) else "a finite number"
        raise ConfigError(f"{config.where(key)}: key '{key}': must be {what}, got {value}")
    for key in RANGES:
        problem = _bounds_problem(key, values[key]) if values.get(key) is not None else None
        if problem:
            raise ConfigError(f"{config.where(key)}: key '{key}': {problem}")
    if config.run.node_rank >= config.run.nnodes:
        raise ConfigError(f"{config.where('node_rank')}: key 'node_rank': {config.run.node_rank} is not below "
                          f"nnodes {config.run.nnodes} (ranks count from 0)")
    if config.run.profile_steps is not None:

        if parse_profile_steps(str(config.run.profile_steps)) is None:
            raise ConfigError(f"{config.where('profile_steps')}: key 'profile_steps': {config.run.profile_steps!r} is "
                              "not A:B with 1 <= A <= B (steps counted from 1, e.g. 10:12)")
    low, high = config.model.min_pixels, config.model.max_pixels
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{config.where('min_pixels')}: key 'min_pixels': {low} is above max_pixels {high}")


def check_question_template(config) -> None:
    template = config.data.question_template
    found = [p for p in QUESTION_PLACEHOLDERS if p in template]
    if len(found) != 1:
        problem = "has no" if not found else "mixes"
        raise ConfigError(f"{config.where('question_template')}: key 'question_template' {problem} "
                          f"{' or '.join(QUESTION_PLACEHOLDERS)} placeholder; write {QUESTION_PLACEHOLDERS[0]} "
                          "once where the row's question goes")


def check_judge_url(config) -> None:
    """judge_url without user:password@: the key comes from judge_api_key_env's variable only."""
    url = getattr(config.reward, "judge_url", None)
    problem = credentials_problem(url, config.reward.judge_api_key_env) if url else None
    if problem:
        raise ConfigError(f"{config.where('judge_url')}: key 'judge_url': {problem}")
