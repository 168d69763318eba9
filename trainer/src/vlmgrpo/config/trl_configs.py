"""The TRL config of each command: TRL's own class (GRPOConfig for `train`, SFTConfig for `sft`) as a dataclass subclass
whose field defaults are the recipe's; every other field, type and help is TRL's.

A field overridden here keeps TRL's type and help (test_config.py holds them equal): the YAML's values are
checked against TRL's types, and `--print-config` prints TRL's help. bf16 and report_to default to "auto", which the
worker resolves for the machine before TRL sees the value (started.resolved_trl_values).

The YAML's values are held, from loading on, in an instance of the class whose __post_init__ has not run yet
(`with_values`): TrainingArguments.__post_init__ sets up the devices (the process group under torchrun, the CUDA
device), builds DeepSpeed's plugin and rewrites values (strategies to enums, report_to to a list). The launcher
process, `--print-config` and `--dry-run` must do none of that, and the checks' own messages (the run plan's, training/plan.py) must come
before TRL's. The worker finishes it (`dataclasses.replace`, which runs __init__ and __post_init__) with the values
it resolves, once per process: training/started.py, build_trl_config.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Mapping

import trl


def _default(base: type, name: str, value) -> Any:
    """BASE's field NAME with another default; its help and choices (the field's metadata) stay TRL's."""
    return dataclasses.field(default=value, metadata=base.__dataclass_fields__[name].metadata)


@dataclasses.dataclass
class VLMR1GRPOConfig(trl.GRPOConfig):
    """VLM-R1's REC recipe (run_grpo_rec.sh) on TRL's GRPOConfig."""

    output_dir: str | None = _default(trl.GRPOConfig, "output_dir", "output")
    num_generations: int | None = _default(trl.GRPOConfig, "num_generations", 8)
    beta: float = _default(trl.GRPOConfig, "beta", 0.04)
    learning_rate: float = _default(trl.GRPOConfig, "learning_rate", 1e-6)
    per_device_train_batch_size: int = _default(trl.GRPOConfig, "per_device_train_batch_size", 8)
    gradient_accumulation_steps: int = _default(trl.GRPOConfig, "gradient_accumulation_steps", 2)
    max_completion_length: int | None = _default(trl.GRPOConfig, "max_completion_length", 2048)
    # VLM-R1 averages each completion's token losses, then over the batch: TRL's "grpo" (TRL defaults to "dapo").
    loss_type: str = _default(trl.GRPOConfig, "loss_type", "grpo")
    # VLM-R1 generates with GenerationConfig(do_sample=True, temperature=1) and transformers' defaults for the
    # rest, so top-k 50 (TRL's default top_k 0 turns top-k off).
    temperature: float = _default(trl.GRPOConfig, "temperature", 1.0)
    top_k: int = _default(trl.GRPOConfig, "top_k", 50)
    top_p: float = _default(trl.GRPOConfig, "top_p", 1.0)
    repetition_penalty: float = _default(trl.GRPOConfig, "repetition_penalty", 1.0)
    num_train_epochs: float = _default(trl.GRPOConfig, "num_train_epochs", 2)
    gradient_checkpointing: bool = _default(trl.GRPOConfig, "gradient_checkpointing", True)
    logging_steps: float = _default(trl.GRPOConfig, "logging_steps", 1)
    save_steps: float = _default(trl.GRPOConfig, "save_steps", 100)
    save_only_model: bool = _default(trl.GRPOConfig, "save_only_model", False)  # resume needs the optimizer state
    seed: int = _default(trl.GRPOConfig, "seed", 42)
    data_seed: int | None = _default(trl.GRPOConfig, "data_seed", 42)
    report_to: None | str | list[str] = _default(trl.GRPOConfig, "report_to", "auto")  # tensorboard if installed
    bf16: bool | None = _default(trl.GRPOConfig, "bf16", "auto")  # true on a bf16-capable GPU


@dataclasses.dataclass
class VlmgrpoSFTConfig(trl.SFTConfig):
    """TRL's SFTConfig with the loss on assistant turns only, and the run settings `train` has."""

    output_dir: str | None = _default(trl.SFTConfig, "output_dir", "output")
    assistant_only_loss: bool = _default(trl.SFTConfig, "assistant_only_loss", True)
    save_steps: float = _default(trl.SFTConfig, "save_steps", 500)
    save_only_model: bool = _default(trl.SFTConfig, "save_only_model", False)  # resume needs the optimizer state
    seed: int = _default(trl.SFTConfig, "seed", 42)
    data_seed: int | None = _default(trl.SFTConfig, "data_seed", 42)
    report_to: None | str | list[str] = _default(trl.SFTConfig, "report_to", "auto")
    bf16: bool | None = _default(trl.SFTConfig, "bf16", "auto")


def own_defaults(config_class: type) -> dict[str, Any]:
    """The defaults the recipe's class sets over TRL's, in the order it declares them."""
    return {name: getattr(config_class, name) for name in inspect.get_annotations(config_class)}


def with_values(config_class: type, values: Mapping[str, Any]):
    """An instance of CONFIG_CLASS holding VALUES over its defaults, its __post_init__ not yet run (module docstring).
    Only its fields are read before the worker finishes it: its properties (world_size, device) set devices up."""
    instance = object.__new__(config_class)
    for f in dataclasses.fields(config_class):
        if not f.init:
            continue
        if f.name in values:
            object.__setattr__(instance, f.name, values[f.name])
        elif f.default_factory is not dataclasses.MISSING:
            object.__setattr__(instance, f.name, f.default_factory())
        elif f.default is not dataclasses.MISSING:
            object.__setattr__(instance, f.name, f.default)
    return instance
