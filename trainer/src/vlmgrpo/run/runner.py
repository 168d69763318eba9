"""What `train` (GRPO) and `sft` share around TRL's trainers: the TRL config built from ours, the run loop with a
checkpoint on SIGTERM and resume, the per-step metrics, and the run's own files."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from vlmgrpo.run.callbacks import CheckpointRecord, GracefulStop, MetricsLogger, MonitorCallback
from vlmgrpo.run.checkpoint import checkpoint_step, latest_checkpoint
from vlmgrpo.config.load import TrainConfig, dump_config
from vlmgrpo.errors import ConfigError
from vlmgrpo.run.launch import resolve_deepspeed, restart_count, write_stop_marker
from vlmgrpo.run.metrics import MetricsView, drop_steps_after
from vlmgrpo.run.prepared import PreparedRun
from vlmgrpo.run.preflight import RUN_LOGS
from vlmgrpo.run.storage import checkpoint_bytes, disk_full, is_out_of_space, warn_if_few_checkpoints_fit

log = logging.getLogger("vlmgrpo")

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
    """What the worker resolves in the TRL config before TRL sees it: the DeepSpeed JSON as prepared
    (PreparedRun.deepspeed), bf16 and report_to "auto" for this machine, evaluation when rows are held out, the CPU."""
    from vlmgrpo.models.loading import cuda_available

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


# build_trl_config's deepspeed when not given: resolved from the config (a config that was not prepared).
FROM_CONFIG: Any = object()


def build_trl_config(config: TrainConfig, deepspeed: Optional[str] = FROM_CONFIG):
    """config.trl finished: its values resolved for this worker and TRL's __post_init__ run (trl_configs.py says why
    only here); deepspeed: the DeepSpeed JSON as prepared."""
    if deepspeed is FROM_CONFIG:
        deepspeed = resolve_deepspeed(config.trl.deepspeed)
    try:
        return dataclasses.replace(config.trl, **resolved_trl_values(config, deepspeed))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{config.source}: invalid {config.command.trl_class} settings: {exc}") from None


def attach_metrics(trainer, output: Path, view: MetricsView) -> None:
    """Our one line per step (stdout and metrics.jsonl) instead of transformers' printer and progress bar."""
    from transformers import PrinterCallback, ProgressCallback

    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    trainer.add_callback(MetricsLogger(output / "metrics.jsonl", view))


def parameter_counts(model) -> tuple[int, int]:
    """(trainable, total); PEFT counts a 4-bit layer's parameters as the unpacked weights they stand for."""
    if hasattr(model, "get_nb_trainable_parameters"):
        return model.get_nb_trainable_parameters()
    parameters = list(model.parameters())
    return sum(p.numel() for p in parameters if p.requires_grad), sum(p.numel() for p in parameters)


def log_parameter_counts(model) -> None:
    trainable, total = parameter_counts(model)
    log.info("trainable parameters: %s of %s (%.2f%%)", f"{trainable:,}", f"{total:,}",
             100 * trainable / max(total, 1))


def write_run_config(config: TrainConfig, output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    (output / "vlmgrpo_config.yaml").write_text(dump_config(config))


def run_training(prepared: PreparedRun) -> int:
    """Train to the end or to a signal with the recipe's trainer, metrics and final save; the process exit code."""
    config, resume = prepared.config, prepared.resume
    recipe = config.command
    trl_config = build_trl_config(config, prepared.deepspeed)
    output = Path(trl_config.output_dir)
    if trl_config.process_index == 0:
        write_run_config(config, output)
        for name in RUN_LOGS:
            drop_steps_after(output / name, checkpoint_step(resume))
        log_restart(output, resume, config.run.max_restarts)
    monitor = start_monitor(config, trl_config, recipe, output)  # before the model loads: /health answers now
    try:
        return train_and_save(prepared, trl_config, monitor)
    finally:
        if monitor is not None:
            monitor.stop()


def train_and_save(prepared: PreparedRun, trl_config, monitor) -> int:
    output = Path(trl_config.output_dir)
    trainer = build_trainer(prepared, trl_config, monitor)
    stop = GracefulStop()
    trainer.add_callback(stop)
    stop.install()
    need = checkpoint_bytes(trainer.model, str(output))
    try:
        trainer.train(resume_from_checkpoint=prepared.resume)
    except Exception as error:
        if not is_out_of_space(error, str(output), need):
            raise
        raise disk_full(str(output), trainer.state.global_step, need) from None
    finally:
        stop.uninstall()
    if stop.signal_number is not None:
        leave_process_group()
        write_stop_marker(stop.signal_number)
        log.warning("stopped by signal after step %d; checkpoint written under %s, continue with --resume auto",
                    trainer.state.global_step, output)
        return stop.exit_code
    prepared.config.command.save(trainer, prepared.config)
    leave_process_group()
    return 0


def build_trainer(prepared: PreparedRun, trl_config, monitor):
    """The recipe's trainer with our callbacks: metrics, the monitor, the profiler; rank 0 says what it trains."""
    config, output = prepared.config, Path(trl_config.output_dir)
    trainer = config.command.build_trainer(prepared, trl_config)
    attach_metrics(trainer, output, config.command.metrics)
    trainer.add_callback(CheckpointRecord(prepared.identity))
    if monitor is not None:
        trainer.add_callback(MonitorCallback(monitor))
    if config.run.profile_steps:
        from vlmgrpo.config.sections import parse_profile_steps
        from vlmgrpo.run.profiling import StepProfiler

        trainer.add_callback(StepProfiler(parse_profile_steps(config.run.profile_steps), output / "profile",
                                          trl_config.process_index))
    if trl_config.process_index == 0:
        log_parameter_counts(trainer.model)
        warn_if_few_checkpoints_fit(trainer.model, str(output))
    return trainer


def start_monitor(config: TrainConfig, trl_config, recipe, output: Path):
    """Rank 0's /metrics and /health (exporter.Monitor) when metrics_port is set; None otherwise."""
    if config.run.metrics_port is None or trl_config.process_index != 0:
        return None
    from vlmgrpo import __version__
    from vlmgrpo.run.exporter import start_monitor as serve

    samples_per_step = (trl_config.per_device_train_batch_size * trl_config.gradient_accumulation_steps
                        * trl_config.world_size)
    monitor = serve(config.run, recipe.metrics, samples_per_step, {"command": recipe.name, "version": __version__})
    newest = latest_checkpoint(str(output))
    if newest is not None:
        monitor.metrics.set("checkpoint_step", checkpoint_step(newest))
    return monitor


def log_restart(output: Path, resume, budget: int) -> None:
    """After a restart: say from where, and count it in metrics.jsonl (a line with the step it continues after)."""
    restarts = restart_count()
    if not restarts:
        return
    log.warning("restart %d of %d after a worker failed: %s", restarts, budget,
                f"continuing from {os.path.basename(resume)}" if resume
                else "no checkpoint was written before the failure, starting again from step 0")
    with (output / "metrics.jsonl").open("a") as stream:
        stream.write(json.dumps({"step": checkpoint_step(resume), "restart": restarts, "max_restarts": budget}) + "\n")


def leave_process_group() -> None:
    """Tear the group down before the interpreter does: a gloo group left to interpreter shutdown aborts the
    process now and then ("terminate called without an active exception", pytorch/pytorch#190489), failing a run
    that finished. No barrier first: the other ranks would time out waiting while rank 0 merges a large model."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
