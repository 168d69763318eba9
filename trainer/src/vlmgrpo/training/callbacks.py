"""Trainer callbacks: per-step metrics, the silent-GRPO watchdog, checkpoint-on-signal."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from vlmgrpo.monitoring.metrics import (MetricsView, bracketed, clean, format_line, gpu_memory_peak_gib, number,
                                        rewards_of)
from vlmgrpo.training.checkpoint import write_record

log = logging.getLogger("vlmgrpo")


class MetricsLogger(TrainerCallback):
    """One concise stdout line per logged step and the same numbers appended to OUTPUT/metrics.jsonl."""

    def __init__(self, path: Path, view: MetricsView):
        self.path = path
        self.view = view
        self.last_time = None
        self.last_step = 0

    def on_step_begin(self, args, state, control, **kwargs):
        if self.last_time is None:
            self.last_time, self.last_step = time.monotonic(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "eval_loss" in logs:
            self.log_evaluation(state, logs)
        if "loss" not in logs:  # the end-of-training summary has train_loss instead
            return
        now = time.monotonic()
        record = {"step": state.global_step, "epoch": clean(logs.get("epoch"))}
        record.update({name: clean(logs[key]) for key, name in self.view.keys.items() if key in logs})
        rewards = rewards_of(logs, "rewards")
        if rewards or "reward" in logs:
            record["rewards"] = rewards
        # Wall-clock seconds per optimizer step, averaged over the logging interval.
        steps = max(state.global_step - self.last_step, 1)
        record["step_time"] = round((now - self.last_time) / steps, 4) if self.last_time else None
        peak = gpu_memory_peak_gib()
        if peak is not None:
            record["gpu_memory_peak_gib"] = peak
        self.last_time, self.last_step = now, state.global_step
        with self.path.open("a") as stream:
            stream.write(json.dumps(record) + "\n")
        print(format_line(record, state.max_steps, self.view), flush=True)

    def log_evaluation(self, state, logs: dict) -> None:
        record = {"step": state.global_step, "epoch": clean(logs.get("epoch"))}
        record.update({key: clean(logs[key]) for key in self.view.eval_keys if key in logs})
        rewards = rewards_of(logs, "eval_rewards")
        if rewards:
            record["eval_rewards"] = rewards
        with self.path.open("a") as stream:
            stream.write(json.dumps(record) + "\n")
        shown = [f"{key.removeprefix('eval_')}={number(record.get(key))}" for key in self.view.eval_keys]
        print(f"eval at step {state.global_step}: {' '.join(shown + ([bracketed(rewards)] if rewards else []))}",
              flush=True)


class ZeroRewardWatchdog(TrainerCallback):
    """GRPO learns nothing when rewards never vary inside a group; say so instead of silently burning GPU hours."""

    HINT = (
        "check the answer format the model produces (a sample: --set dump_completions=true, then "
        "OUTPUT/completions.jsonl), that the reward parses it (<think>...</think><answer>[x1,y1,x2,y2]</answer> or "
        "{\"bbox_2d\": [...]}), and the box coordinate spaces: dataset box_space (absolute or norm1000) and "
        "answer_box_space (resized for Qwen2.5-VL, norm1000 for Qwen2-VL)"
    )

    def __init__(self, patience: int):
        self.patience = patience
        self.zero_streak: dict[str, int] = {}
        self.flat_streak = 0
        self.warnings: list[str] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return
        for key, value in logs.items():
            if key.startswith("rewards/") and key.endswith("/mean"):
                name = key.split("/")[1]
                streak = self.zero_streak.get(name, 0) + 1 if value == 0 else 0
                self.zero_streak[name] = streak
                if streak == self.patience:
                    self.warn(f"reward '{name}' has been 0 for {streak} consecutive logged steps")
        flat = logs.get("frac_reward_zero_std") == 1.0
        self.flat_streak = self.flat_streak + 1 if flat else 0
        if self.flat_streak == self.patience:
            self.warn(f"every group has had zero reward std for {self.flat_streak} consecutive logged steps, "
                      "so advantages and gradients are zero")

    def warn(self, problem: str) -> None:
        hint = self.HINT if not self.warnings else "see the checks suggested above"
        message = f"GRPO is not learning: {problem}; {hint}"
        self.warnings.append(message)
        log.warning(message)


class GracefulStop(TrainerCallback):
    """On SIGTERM/SIGINT: finish the current step, write a checkpoint, stop. A second SIGINT aborts at once."""

    def __init__(self):
        self.signal_number = None
        self._previous = {}

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum, frame):
        if self.signal_number is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_number = signum
        log.warning("received %s: saving a checkpoint at the end of this step, then stopping",
                    signal.Signals(signum).name)

    def _any_rank_stopping(self, args) -> bool:
        """All ranks must agree, or the ones that keep going hang in the next collective."""
        import torch
        import torch.distributed as dist

        stopping = self.signal_number is not None
        if not (dist.is_available() and dist.is_initialized()):
            return stopping
        flag = torch.tensor([1 if stopping else 0], device=args.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_step_end(self, args, state, control, **kwargs):
        if self._any_rank_stopping(args):
            if self.signal_number is None:
                self.signal_number = signal.SIGTERM
            control.should_save = True
            control.should_training_stop = True

    @property
    def exit_code(self) -> int:
        """128 + signal number, the shell convention: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + int(self.signal_number) if self.signal_number is not None else 0


class CheckpointRecord(TrainerCallback):
    """After each save, rank 0 writes the checkpoint's record (checkpoint.RECORD): whose run it is, each file's size."""

    def __init__(self, identity: dict):
        self.identity = identity

    def on_save(self, args, state, control, **kwargs):
        saved = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and saved.is_dir():
            write_record(str(saved), self.identity)


class MonitorCallback(TrainerCallback):
    """Feeds rank 0's metrics server (exporter.Monitor): step times into the health clock, logged numbers into the
    Prometheus gauges, checkpoints and evaluation batches as signs of progress."""

    def __init__(self, monitor):
        self.monitor = monitor
        self.step_started = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.monitor.metrics.set("max_steps", state.max_steps)

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        duration = now - self.step_started if self.step_started is not None else 0.0
        clock = self.monitor.clock
        clock.step_finished(state.global_step, duration, now)
        self.monitor.metrics.step_finished(state.global_step, duration, clock.median())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.monitor.metrics.logged(logs, time.monotonic())

    def on_save(self, args, state, control, **kwargs):
        self.monitor.clock.progress(time.monotonic())
        self.monitor.metrics.set("checkpoint_step", state.global_step)

    def on_prediction_step(self, args, state, control, **kwargs):
        self.monitor.clock.progress(time.monotonic())

    def on_evaluate(self, args, state, control, **kwargs):
        self.monitor.clock.progress(time.monotonic())

    def on_train_end(self, args, state, control, **kwargs):
        self.monitor.clock.finish()


def attach_metrics(trainer, output: Path, view: MetricsView) -> None:
    """Our one line per step (stdout and metrics.jsonl) instead of transformers' printer and progress bar."""
    from transformers import PrinterCallback, ProgressCallback

    for noisy in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(noisy)
    trainer.add_callback(MetricsLogger(output / "metrics.jsonl", view))
