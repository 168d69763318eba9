"""What a training run needs, resolved once by the checks before any weights load, and then only consumed.

`prepare(config)` runs the command's checks (its Recipe's `validate`: preflight.py's shared checks and its own) and
keeps what they resolved in a PreparedRun: the rows, the reward functions, the DeepSpeed JSON, the checkpoint to
resume from and the run's identity, the model kind. `--dry-run` prints it; the process that trains starts it
(started.py: the TRL config finished, the attention kernel chosen), and the runner (runner.py) and the recipe's
`build_trainer` take that and resolve none of it again. A restart under torchrun is a new worker process, which
prepares again: its resume point is then the newest checkpoint (`--resume auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

if TYPE_CHECKING:
    from vlmgrpo.config.load import TrainConfig
    from vlmgrpo.data.datasets import LoadedData


@dataclass(frozen=True)
class PreparedRun:
    config: TrainConfig
    data: LoadedData  # every training and evaluation row, validated, and the validation split
    # The custom reward functions by their reward_funcs name (module:function), imported; the built-in rewards are
    # made with the model (their answer box space, the processor's resize). Empty for `sft`.
    rewards: Mapping[str, Callable[..., list]]
    deepspeed: Optional[str]  # the DeepSpeed JSON's path (a preset's, shipped in the package); None without
    resume: Optional[str]  # the checkpoint-N directory to continue from; None: from step 0
    identity: dict[str, Any]  # whose checkpoints this run writes and may resume (checkpoint.run_identity)
    vision: bool  # the model kind: a vision-language model, else a text-only causal LM
    # The processor or tokenizer the checks loaded (sft's chat template check), which the trainer is then given; None
    # where they load none (`train` loads the processor with the model)
    processing_class: Any = None


def prepare(config: TrainConfig) -> PreparedRun:
    """Every check of the config's command that needs no weights, and what they resolved."""
    return config.command.validate(config)
