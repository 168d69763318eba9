"""A RunPlan started in the process that trains it (one process, or each torchrun worker), with what only that
process may resolve: the TRL config finished and the attention kernel chosen (with flash-attention 4, its kernel
cache set up from the image's: vlmgrpo/fa4kernels/runtime.py). `start(plan)` makes it once per
process (Recipe.run); the runner (runner.py), the recipe's `build_trainer` and the model loading take it and resolve
none of it again.

Neither runs in the launcher, `--dry-run` or `--print-config`: TRL's __post_init__ sets up accelerate and the
process's device (config/trl_configs.py says more), and the attention choice reads every GPU's compute capability
(models/attention.py), which initialises CUDA.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from vlmgrpo.errors import ConfigError
from vlmgrpo.fa4kernels.runtime import model_family, prepare
from vlmgrpo.models.attention import FA4, choose_attention
from vlmgrpo.models.loading import load_model_config
from vlmgrpo.models.source import cuda_available

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.training.plan import RunPlan

log = logging.getLogger("vlmgrpo")


@dataclass(frozen=True)
class StartedRun:
    plan: RunPlan
    # The recipe's TRL config (config.trl, an instance of its trl_configs.py class) finished for this process: the
    # values resolved_trl_values sets, and TRL's __post_init__ run. The one TRL config the trainer is given.
    trl_args: Any
    attention: str  # the attn_implementation the model loads with (models/attention.choose_attention)


def start(plan: RunPlan) -> StartedRun:
    """The process's part, once: the TRL config finished, then the attention kernel chosen (its one "attention: ..."
    line; a ConfigError for a flash-attention request that cannot run here). TRL first, in the order the run had
    before this step: its __post_init__ puts a torchrun worker on its own GPU before the GPUs are queried."""
    trl_args = build_trl_config(plan.config, plan.launch.deepspeed)
    attention = choose_attention(plan.config.model.attn_implementation)
    if attention == FA4:  # before the model loads, which imports FA4: it reads its cache's place at import
        family = model_family(load_model_config(plan.model.base))
        line = prepare(str(trl_args.output_dir), family)
        if int(os.environ.get("RANK", "0")) == 0:
            log.info("%s", line)
    return StartedRun(plan, trl_args, attention)


# Old names the recipe, VLM-R1's scripts and users' configs say, and the names transformers 5 gives them: the new
# name takes the old one's value where the installed TrainingArguments has it and the new one is unset, so
# transformers 5 prints no deprecation warning at every start, and 4.x, which knows only the old name, still gets it.
RENAMED_TRL_KEYS = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


def under_current_names(trl) -> dict[str, Any]:
    """The changes that move TRL config TRL's old names to the new ones (the new name takes the old one's value, the
    old one None): TRL's SFTConfig defaults gradient_checkpointing to True, which transformers 5 warns about."""
    fields = {f.name for f in dataclasses.fields(trl)}
    changes = {}
    for old, new in RENAMED_TRL_KEYS.items():
        if new in fields and getattr(trl, new) is None and getattr(trl, old) is not None:
            changes.update({new: getattr(trl, old), old: None})
    return changes


def resolved_trl_values(config: TrainConfig, deepspeed: Optional[str]) -> dict[str, Any]:
    """What the worker resolves in the TRL config before TRL sees it: the DeepSpeed JSON as planned
    (RunPlan.launch.deepspeed), bf16 and report_to "auto" for this machine, evaluation when rows are held out, the CPU."""
    trl = config.trl
    changes = under_current_names(trl)
    if (config.data.val_split_ratio or config.data.eval_data) and not config.is_set("eval_strategy"):
        # Held-out rows are evaluated at every checkpoint unless eval_strategy / eval_steps say otherwise.
        changes["eval_strategy"] = "steps"
        if not config.is_set("eval_steps"):
            changes["eval_steps"] = trl.save_steps
    changes["deepspeed"] = deepspeed
    if trl.bf16 == "auto":
        import torch

        changes["bf16"] = cuda_available() and torch.cuda.is_bf16_supported()
    if trl.report_to == "auto":
        changes["report_to"] = ["tensorboard"] if importlib.util.find_spec("tensorboard") else "none"
    reporters = changes.get("report_to", trl.report_to)
    if "wandb" in ([reporters] if isinstance(reporters, str) else reporters or []):
        # wandb writes its run under the working directory, which an image's arbitrary uid often cannot write:
        # beside the run instead, unless WANDB_DIR says where (WANDB_MODE=offline keeps it there to `wandb sync`).
        os.environ.setdefault("WANDB_DIR", str(trl.output_dir))
        wandb_offline_without_key()
    if not cuda_available():
        if not config.is_set("use_cpu"):
            changes["use_cpu"] = True
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not config.is_set("ddp_backend"):
            changes["ddp_backend"] = "gloo"
    if not config.is_set("disable_tqdm"):  # our MetricsLogger prints one line per step; tqdm's would interleave
        changes["disable_tqdm"] = True
    return changes


def wandb_offline_without_key() -> None:
    """VLM-R1's scripts say --report_to wandb; without a key (WANDB_API_KEY, or a `wandb login` in ~/.netrc) wandb
    would ask for one and stop the run: it runs offline instead, into WANDB_DIR, for `wandb sync` later."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return
    try:
        import netrc

        if netrc.netrc().authenticators("api.wandb.ai"):
            return
    except (OSError, netrc.NetrcParseError):
        pass
    os.environ["WANDB_MODE"] = "offline"
    log.warning("report_to wandb: no WANDB_API_KEY or wandb login here, so wandb runs offline into %s (upload it "
                "later with `wandb sync`; set WANDB_MODE=online with a key to report live)", os.environ["WANDB_DIR"])


def build_trl_config(config: TrainConfig, deepspeed: Optional[str]):
    """config.trl finished: its values resolved for this process and TRL's __post_init__ run (trl_configs.py says
    why only here); deepspeed: the DeepSpeed JSON as planned (RunPlan.launch.deepspeed). A run calls it once, in
    start."""
    try:
        return dataclasses.replace(config.trl, **resolved_trl_values(config, deepspeed))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{config.source}: invalid {config.command.trl_class} settings: {exc}") from None
