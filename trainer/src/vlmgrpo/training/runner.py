"""What `train` (GRPO) and `sft` share around TRL's trainers: the run loop of a StartedRun (started.py: the TRL config
finished, the attention kernel chosen) with a checkpoint on SIGTERM and resume, the per-step metrics, and the run's own
files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vlmgrpo import __version__
from vlmgrpo.config.sections import parse_profile_steps
from vlmgrpo.training.callbacks import CheckpointRecord, GracefulStop, MonitorCallback, attach_metrics
from vlmgrpo.training.checkpoint import RUN_LOGS, checkpoint_step, latest_checkpoint
from vlmgrpo.config.dump import dump_config
from vlmgrpo.config.train_config import TrainConfig
from vlmgrpo.launch.torchrun import restart_count, write_stop_marker
from vlmgrpo.monitoring.metrics import drop_steps_after
from vlmgrpo.training.profiling import StepProfiler
from vlmgrpo.training.started import StartedRun
from vlmgrpo.training.storage import (checkpoint_bytes, disk_full, is_out_of_space, is_past_file_size_limit,
                                  past_file_size_limit, warn_if_few_checkpoints_fit)

log = logging.getLogger("vlmgrpo")


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


def run_training(started: StartedRun) -> int:
    """Train to the end or to a signal with the recipe's trainer, metrics and final save; the process exit code."""
    config, resume, trl_args = started.plan.config, started.plan.output.resume, started.trl_args
    output = Path(trl_args.output_dir)
    if trl_args.process_index == 0:
        write_run_config(config, output)
        for name in RUN_LOGS:
            drop_steps_after(output / name, checkpoint_step(resume))
        log_restart(output, resume, config.run.max_restarts)
    monitor = start_monitor(config, trl_args, config.command, output)  # before the model loads: /health answers now
    try:
        return train_and_save(started, monitor)
    finally:
        if monitor is not None:
            monitor.stop()


def train_and_save(started: StartedRun, monitor) -> int:
    plan, output = started.plan, Path(started.trl_args.output_dir)
    trainer = build_trainer(started, monitor)
    stop = GracefulStop()
    trainer.add_callback(stop)
    stop.install()
    need = checkpoint_bytes(trainer.model, str(output))
    try:
        trainer.train(resume_from_checkpoint=plan.output.resume)
    except Exception as error:
        if is_past_file_size_limit(error):
            raise past_file_size_limit(str(output), trainer.state.global_step) from None
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
    plan.config.command.save(trainer, plan.config)
    leave_process_group()
    return 0


def build_trainer(started: StartedRun, monitor):
    """The recipe's trainer with our callbacks: metrics, the monitor, the profiler; rank 0 says what it trains."""
    config, trl_args = started.plan.config, started.trl_args
    output = Path(trl_args.output_dir)
    trainer = config.command.build_trainer(started)
    attach_metrics(trainer, output, config.command.metrics)
    trainer.add_callback(CheckpointRecord(started.plan.output.identity))
    if monitor is not None:
        trainer.add_callback(MonitorCallback(monitor))
    if config.run.profile_steps:
        trainer.add_callback(StepProfiler(parse_profile_steps(config.run.profile_steps), output / "profile",
                                          trl_args.process_index))
    if trl_args.process_index == 0:
        log_parameter_counts(trainer.model)
        warn_if_few_checkpoints_fit(trainer.model, str(output))
    return trainer


def start_monitor(config: TrainConfig, trl_args, recipe, output: Path):
    """Rank 0's /metrics and /health (exporter.Monitor) when metrics_port is set; None otherwise."""
    if config.run.metrics_port is None or trl_args.process_index != 0:
        return None
    from vlmgrpo.monitoring.exporter import start_monitor as serve  # prometheus_client: only with a metrics_port

    samples_per_step = (trl_args.per_device_train_batch_size * trl_args.gradient_accumulation_steps
                        * trl_args.world_size)
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
