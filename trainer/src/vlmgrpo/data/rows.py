"""A run's rows, the owner of the data part of the run plan (training/plan.py): every training and evaluation row read
and validated for what the run's rewards need (a box, an accuracy method, a judge that answers now), and the
validation split. `score` and `eval` read theirs here too."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from vlmgrpo.boxes import ABSOLUTE
from vlmgrpo.data.datasets import LoadedData, RowValidator, load_data
from vlmgrpo.data.rec import validate_row
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards import BOX_REWARDS, JSONL_ACCURACY, reward_functions
from vlmgrpo.rewards.accuracy import DEFAULT_METHOD, LLM
from vlmgrpo.rewards.judge import Judge

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig


def load_rows(config: TrainConfig, validate: RowValidator) -> LoadedData:
    """Every training and evaluation row, validated, and the validation split."""
    if config.data.eval_data and config.data.val_split_ratio:
        raise ConfigError(f"{config.where('eval_data')}: key 'eval_data': give evaluation rows either as eval_data or "
                          "by val_split_ratio, not both")
    seed = config.trl.data_seed or config.trl.seed
    data = load_data(config.data.data, config.data.image_root, getattr(config.data, "box_space", ABSOLUTE),
                     seed=seed, validate=validate, eval_entries=config.data.eval_data,
                     reward_method=getattr(config.data, "reward_method", None))
    data.split_validation(config.data.val_split_ratio, seed)
    return data


def load_checked_data(config: TrainConfig) -> LoadedData:
    """What `score` and `eval` need too: the rewards checked, every data row, the validation split."""
    reward_functions(config)
    return load_scored_rows(config)


def load_scored_rows(config: TrainConfig) -> LoadedData:
    """Every row, checked for what its rewards need (a box, a method, a judge that answers)."""
    names = config.reward.reward_funcs
    data = load_rows(config, functools.partial(validate_row, require_box=any(name in BOX_REWARDS for name in names),
                                               check_method=JSONL_ACCURACY in names))
    warn_boxes_scored_as_text(config, data)
    if JSONL_ACCURACY in names and any(row.reward_method == LLM for row in data.samples + data.validation):
        check_judge(config)
    return data


def warn_boxes_scored_as_text(config: TrainConfig, data: LoadedData) -> None:
    """accuracy meant REC's IoU here until it followed VLM-R1: a REC config that still says it, without
    is_reward_customized_from_vlm_module, now scores its boxes by the default method (math or exact text). Said once."""
    if config.reward.is_reward_customized_from_vlm_module is not None or "reward_funcs" not in config.notes:
        return
    boxed = [row for row in data.samples if row.solution is not None and row.reward_method == DEFAULT_METHOD]
    if boxed:
        logging.getLogger("vlmgrpo").warning(
            "%s: reward 'accuracy' scores %d of %d rows, whose answers are boxes, by the default method (a math or "
            "exact match of the answer text), as VLM-R1 does without is_reward_customized_from_vlm_module; for "
            "REC's IoU write the reward iou, or set is_reward_customized_from_vlm_module true",
            config.where("reward_funcs"), len(boxed), len(data.samples))


def check_judge(config: TrainConfig) -> None:
    """Rows scored by the llm method need a judge that answers now, not a reward of 0 at step 1."""
    judge = Judge.from_config(config.reward, config.where("judge_url"))
    if judge is None:
        raise ConfigError(f"{config.where('judge_url')}: key 'judge_url': rows are scored by the llm method "
                          "(accu_reward_method): set judge_url and judge_model to the judge's OpenAI-compatible "
                          "endpoint")
    judge.check(config.where("judge_url"))
