"""A training run's plan, made once per process before any weights load, by make_plan asking each owner once, in
one direction: GRPO's rollouts first (rollouts.py: vLLM where use_vllm asks for it), the model (models/source.py: its
kind the recipe asks for last, as a hub id's config.json is a download), the output (output.py), what the environment
must support of the TRL values (support.py), the launch (launch/torchrun.py), then the command's own work (its Recipe's
plan_work: GRPO's rewards and rows, SFT's chat template and rows). Each owner checks what it returns. `--dry-run`
prints the plan's rows; the process that trains starts it (started.py: the TRL config finished, the attention kernel
chosen), and the runner (runner.py) and the recipe's build_trainer only read it. A restart under torchrun is a new
worker process, which plans again: its resume point is then the newest checkpoint (`--resume auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from vlmgrpo.launch.torchrun import plan_launch
from vlmgrpo.models import source
from vlmgrpo.training.output import plan_output
from vlmgrpo.training.rollouts import check_vllm
from vlmgrpo.training.support import check_supported

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.data.datasets import LoadedData
    from vlmgrpo.models.source import ModelSource
    from vlmgrpo.launch.torchrun import LaunchPlan
    from vlmgrpo.training.output import OutputPlan


@dataclass(frozen=True)
class RunPlan:
    config: TrainConfig
    model: ModelSource  # the base model, the adapter, the kind
    output: OutputPlan  # the directory, whose run it holds, the checkpoint to resume from, what to clear
    launch: LaunchPlan  # the world size, DeepSpeed's JSON
    # The custom reward functions by their reward_funcs name (module:function), imported; the built-in rewards are
    # made with the model (their answer box space, the processor's resize). Empty for `sft`.
    rewards: Mapping[str, Callable[..., list]]
    data: LoadedData  # every training and evaluation row, validated, and the validation split
    # The processor or tokenizer the plan loaded (sft's chat template check), which the trainer is then given; None
    # where it loads none (`train` loads the processor with the model)
    processing_class: Any = None


def make_plan(config: TrainConfig) -> RunPlan:
    """Every check of the run that needs no weights, owner by owner, and what each resolved."""
    if getattr(config.trl, "use_vllm", False):  # GRPO's rollouts: without vLLM or a GPU for it nothing else matters
        check_vllm(config, source.cuda_available)
    model = source.plan_model(config)
    output = plan_output(config, model)
    check_supported(config)
    launch = plan_launch(config)
    work = config.command.plan_work(config, model, launch)
    return RunPlan(config, work.model, output, launch, work.rewards, work.data, work.processing_class)
