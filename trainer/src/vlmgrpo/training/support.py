"""What a run checks of its TRL values before any weights load, beyond their ranges (value_checks.py, at load): that
evaluation has rows to run on, and that the reporters and kernels they name can come here (installed packages, the
Hub reachable). Run by the run plan (plan.py), not by --print-config. Each failure is one line."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from vlmgrpo.errors import ConfigError
from vlmgrpo.models.source import offline

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig


def check_supported(config: TrainConfig) -> None:
    check_evaluation(config)
    check_reporting(config)
    check_kernels(config)


def check_evaluation(config: TrainConfig) -> None:
    strategy = config.trl.eval_strategy
    if strategy != "no" and not (config.data.val_split_ratio or config.data.eval_data):
        raise ConfigError(f"{config.where('eval_strategy')}: key 'eval_strategy': {strategy} needs rows to evaluate "
                          "on; set val_split_ratio (e.g. 0.05) to hold some out, or eval_data")


def check_reporting(config: TrainConfig) -> None:
    """report_to names transformers knows, each with its package installed (tensorboard is a vlmgrpo dependency)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    value = config.trl.report_to
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


def check_kernels(config: TrainConfig) -> None:
    """Kernels TRL or transformers would fetch or patch in at the first step, refused before it when they cannot come:
    Liger's (use_liger_kernel: the liger-kernel package) and the Hub's (model_init_kwargs use_kernels: the kernels
    package downloads them from the Hugging Face Hub at run time, which HF_HUB_OFFLINE=1, as clusters run, forbids).
    The images carry neither package: their attention kernels are attn_implementation's, built in."""
    trl = config.trl
    if getattr(trl, "use_liger_kernel", False) and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(f"{config.where('use_liger_kernel')}: key 'use_liger_kernel': TRL patches the model with "
                          "the liger-kernel package, which is not installed here; set it to false (attention "
                          "kernels come from attn_implementation) or pip install liger-kernel")
    init = getattr(trl, "model_init_kwargs", None)
    if isinstance(init, dict) and init.get("use_kernels"):
        where = f"{config.where('model_init_kwargs')}: key 'model_init_kwargs': use_kernels"
        if importlib.util.find_spec("kernels") is None:
            raise ConfigError(f"{where}: transformers downloads these kernels from the Hugging Face Hub with the "
                              "kernels package, which is not installed here; drop use_kernels (attention kernels "
                              "come from attn_implementation, built into the image) or pip install kernels")
        if offline():
            raise ConfigError(f"{where}: transformers downloads these kernels from the Hugging Face Hub at the "
                              "first step, and HF_HUB_OFFLINE is set; drop use_kernels, or run where the Hub is "
                              "reachable once with HF_HUB_OFFLINE unset")
