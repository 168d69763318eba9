"""`--profile-steps A:B`: steps A to B (counted from 1) recorded with torch.profiler, CPU and, where there is a GPU,
CUDA, written as a Chrome/TensorBoard trace per rank under OUTPUT/profile/: the first look when GPU utilisation is
low (data loading, generation, or the optimizer step?)."""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger("vlmgrpo")


class StepProfiler(TrainerCallback):
    def __init__(self, steps: tuple[int, int], directory: Path, rank: int):
        self.first, self.last = steps
        self.path = directory / f"rank{rank}-steps{self.first}-{self.last}.pt.trace.json"
        self.profiler = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.profiler is None and state.global_step + 1 == self.first:
            import torch
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self.profiler = profile(activities=activities, record_shapes=True, with_stack=False)
            self.profiler.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.profiler is not None and state.global_step >= self.last:
            self.finish()

    def on_train_end(self, args, state, control, **kwargs):
        if self.profiler is not None:  # the run ended (or stopped) inside the range
            self.finish()

    def finish(self) -> None:
        self.profiler.stop()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        self.profiler.export_chrome_trace(str(partial))
        partial.replace(self.path)
        self.profiler = None
        log.info("profile of steps %d-%d: %s (open in TensorBoard's profiler, Perfetto or chrome://tracing)",
                 self.first, self.last, self.path)
