"""Every check that needs no model, run by `train` (and `--dry-run`) before any weights load, and by `score`.

Each failure is one line saying what is wrong, where it was set, and what to do.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

from .access import nearest_existing, unreadable, unreadable_in_tree, unwritable_directory
from .checkpoint import checkpoint_dirs, resolve_resume
from .config import TrainConfig
from .data import LoadedData, load_data
from .errors import ConfigError, LaunchError
from .launch import check_batch, resolve_deepspeed, under_torchrun, world_size
from .rewards import BOX_REWARDS, check_reward_names

# Hub repository ids: "name" or "owner/name"; anything else is a local path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# What an earlier run leaves in its output directory besides checkpoints (see callbacks.py and train.py).
RUN_LOGS = ("metrics.jsonl", "completions.jsonl")


def _offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in
               ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_model_source(config: TrainConfig) -> None:
    """A local model directory must exist, hold config.json and be readable by this uid; a hub id must be
    reachable (not offline) or cached."""
    value = config.model.model_name_or_path
    where = f"{config.where('model_name_or_path')}: key 'model_name_or_path'"
    if not value:
        raise ConfigError(f"{where} is not set (or pass --model PATH)")
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        problems = [p for p in (unreadable(path),) if p] or [unreadable(p) for p in unreadable_in_tree(path)]
        if problems:
            more = f" ({len(problems) - 1} more like it: chmod -R a+rX {path})" if len(problems) > 1 else ""
            raise ConfigError(f"{where}: {problems[0]}{more}")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ConfigError(f"{where}: {path} has no config.json, so it is not a saved transformers model; give "
                              "the directory save_pretrained wrote (config.json, weights, processor files)")
        return
    if os.path.exists(path):
        raise ConfigError(f"{where}: {path} is a file; give the model's directory")
    if not _HUB_ID.match(value):
        ancestor = nearest_existing(Path(path))
        reason = unreadable(str(ancestor)) or "no such directory"  # an ancestor this uid cannot enter hides it
        raise ConfigError(f"{where}: {value} does not exist ({reason}); give the directory of a saved model "
                          "(config.json, weights, processor files) or a hub id such as Qwen/Qwen2.5-VL-3B-Instruct")
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(value, "config.json"), str):
            raise ConfigError(f"{where}: {value} is neither a local directory nor a model in the hub cache, and "
                              "downloads are off (HF_HUB_OFFLINE=1); give the model's directory")


def check_reporting(config: TrainConfig) -> None:
    """report_to names transformers knows, each with its package installed (tensorboard is a vlmgrpo dependency)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    value = config.grpo.get("report_to")
    names = [value] if isinstance(value, str) else list(value or [])
    available = get_available_reporting_integrations()
    for name in names:
        if name in ("none", "all", "auto"):
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise ConfigError(f"{config.where('report_to')}: key 'report_to': unknown reporter '{name}'; use none, "
                              f"auto or some of: {', '.join(INTEGRATION_TO_CALLBACK)}")
        if name not in available:
            raise ConfigError(f"{config.where('report_to')}: key 'report_to': {name} is not installed in this "
                              f"environment; pip install {name}, or set report_to: none")


def earlier_run(output: str) -> list[str]:
    """What a previous run left in output: its checkpoint directories and logs."""
    found = [os.path.basename(p) for p in checkpoint_dirs(output)]
    return found + [name for name in RUN_LOGS if os.path.isfile(os.path.join(output, name))]


def check_output(config: TrainConfig) -> None:
    """The output directory is writable, and holds no earlier run unless told to resume it or start over."""
    output = config.grpo["output_dir"]
    where = config.where("output_dir")
    problem = unwritable_directory(output)
    if problem:
        raise ConfigError(f"{where}: key 'output_dir': {problem}")
    if config.run.resume not in (None, "auto"):
        resolve_resume(config.run.resume, output)  # a --resume PATH that is no checkpoint fails here
    if config.run.resume and config.run.overwrite_output:
        raise ConfigError(f"{config.where('overwrite_output')}: --overwrite-output starts over and --resume "
                          f"{config.run.resume} continues: give one of them")
    if under_torchrun() or config.run.resume or config.run.overwrite_output:
        return  # under torchrun the launching process has checked (and cleared) it already
    found = earlier_run(output)
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(f"{where}: key 'output_dir': {output} already holds an earlier run ({shown}); continue it "
                          "with --resume auto, start over with --overwrite-output (removes its checkpoints and "
                          "logs), or choose another --output")


def clear_earlier_run(config: TrainConfig) -> list[str]:
    """--overwrite-output: remove the earlier run's checkpoints and logs (once, by the launching process)."""
    output = config.grpo["output_dir"]
    if not config.run.overwrite_output or under_torchrun() or config.run.node_rank != 0:
        return []
    found = earlier_run(output)
    for name in found:
        path = os.path.join(output, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return found


def load_checked_data(config: TrainConfig) -> LoadedData:
    """What `score` needs too: the rewards, every data row, the validation split."""
    names = config.reward.reward_funcs
    check_reward_names(names, config.where("reward_funcs"))
    weights = config.grpo.get("reward_weights")
    if weights is not None and len(weights) != len(names):
        raise ConfigError(f"{config.where('reward_weights')}: key 'reward_weights': {len(weights)} weights for "
                          f"{len(names)} reward_funcs {names}")
    seed = config.grpo.get("data_seed") or config.grpo.get("seed", 42)
    data = load_data(config.data.data, config.data.image_root, config.data.box_space, seed=seed,
                     require_box=any(name in BOX_REWARDS for name in names))
    data.split_validation(config.data.val_split_ratio, seed)
    return data


def check_evaluation(config: TrainConfig) -> None:
    strategy = config.grpo.get("eval_strategy", "no")
    if strategy != "no" and not config.data.val_split_ratio:
        raise ConfigError(f"{config.where('eval_strategy')}: key 'eval_strategy': {strategy} needs rows to evaluate "
                          "on; set val_split_ratio (e.g. 0.05) to hold some out")


def validate(config: TrainConfig) -> LoadedData:
    """Everything that can be checked without a model: config values, paths, batch shape, every data row."""
    check_model_source(config)
    check_output(config)
    check_evaluation(config)
    check_reporting(config)
    check_batch(config, world_size(config.run))
    if config.grpo.get("deepspeed"):
        resolve_deepspeed(config.grpo["deepspeed"])  # a missing or broken JSON fails here, before any model
        if importlib.util.find_spec("deepspeed") is None:
            raise LaunchError(f"deepspeed {config.grpo['deepspeed']} requested but the deepspeed package is not "
                              "installed; use an image with DeepSpeed or drop --deepspeed")
    return load_checked_data(config)
