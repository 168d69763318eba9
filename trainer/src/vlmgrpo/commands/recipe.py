"""A training command (`vlmgrpo train`, `vlmgrpo sft`) as one object: its configuration (its TRL config class, with
the recipe's defaults, and its sections), its command-line options, and the same four parts for every command:

  plan_work(config, model, launch)   its own part of the run plan (plan.py), after the parts every command shares:
                                     the rewards, the rows, a processing class it loaded, each checked (-> Work);
  build_trainer(started)             the TRL trainer, its model and data, from the StartedRun (started.py): the
                                     RunPlan, the finished TRL config, the attention kernel;
  save(trainer, config)              the final model: one layout for every command (below);
  metrics                            the MetricsView: what metrics.jsonl holds and the stdout line shows.

commands/training.py registers every recipe in the table the CLI iterates. Only light modules are imported here
and in the recipes' module level: the CLI imports them to register its commands, and `info`/`selftest` must start without trl.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

from vlmgrpo.monitoring.metrics import MetricsView

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.data.datasets import LoadedData
    from vlmgrpo.models.source import ModelSource
    from vlmgrpo.launch.torchrun import LaunchPlan
    from vlmgrpo.training.plan import RunPlan
    from vlmgrpo.training.started import StartedRun

# The final model of every command: full fine-tuning saves it in OUTPUT itself; LoRA saves the adapter (with the
# processor or tokenizer) in OUTPUT/adapter and, with merge_lora, the adapter merged into its base in OUTPUT/merged.
ADAPTER_DIR, MERGED_DIR = "adapter", "merged"


class Work(NamedTuple):
    """A recipe's own part of the run plan (RunPlan's fields of the same names)."""

    rewards: Mapping[str, Callable[..., list]]
    data: LoadedData
    model: ModelSource  # with its kind (models/loading.model_kind)
    processing_class: Any = None


@dataclass(frozen=True)
class Option:
    """A command-line option of one command (beyond the options every training command has), for the TRL config
    field of its name: its help is the field's, plus `more`."""

    flag: str
    type: type
    more: str = ""


class Recipe:
    name: str  # the command
    summary: str  # its --help text
    trl_class: str  # the name of the config class in trl it subclasses, as messages name it
    trl_config: str  # the subclass with the recipe's defaults over TRL's, in config/trl_configs.py
    metrics: MetricsView
    options: tuple[Option, ...] = ()

    @property
    def sections(self) -> tuple[type, ...]:
        """Its dataclasses of vlmgrpo keys (model_config.py, sections.py); imported when asked for, as model_config.py imports trl."""
        raise NotImplementedError

    def trl_config_class(self):
        """Imported when asked for: config/trl_configs.py imports trl."""
        from vlmgrpo.config import trl_configs

        return getattr(trl_configs, self.trl_config)

    def plan_work(self, config: TrainConfig, model: ModelSource, launch: LaunchPlan) -> Work:
        raise NotImplementedError

    def build_trainer(self, started: StartedRun):
        raise NotImplementedError

    def save(self, trainer, config: TrainConfig) -> None:
        """The final model in the layout above (ADAPTER_DIR, MERGED_DIR)."""
        from vlmgrpo.models.loading import merge_adapter

        output = trainer.args.output_dir
        if not config.model.use_peft:
            trainer.save_model(output)  # safetensors, with the processor or tokenizer
            return
        adapter = os.path.join(output, ADAPTER_DIR)
        trainer.save_model(adapter)  # a PEFT model saves its adapter
        if config.model.merge_lora and trainer.accelerator.is_main_process:
            merge_adapter(adapter, config.model.model_name_or_path, os.path.join(output, MERGED_DIR))

    def run(self, plan: RunPlan) -> int:
        """Train here (one process, or one worker under torchrun), started once (started.py); the exit code."""
        from vlmgrpo.training.runner import run_training
        from vlmgrpo.training.started import start

        return run_training(start(plan))

    def __repr__(self) -> str:
        return f"<recipe {self.name}: trl.{self.trl_class}>"
