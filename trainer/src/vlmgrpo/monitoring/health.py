"""Whether a run is making progress: the /health verdict from step times alone (no transformers, no HTTP).

A run is unhealthy when no step has finished for `health_stall_factor` times the median of its recent step times
(at least `health_stall_min_s` seconds): a hung collective, a stuck data loader, a dead GPU. Before its first step it
is healthy for `health_startup_s` seconds (model loading, the first generation). A checkpoint being written or an
evaluation batch also counts as progress, so a long save between two steps is no stall. The verdict recovers as
soon as a step finishes again. The callback feeding it is exporter.ServiceCallback."""

from __future__ import annotations

import statistics
import threading
from collections import deque
from dataclasses import dataclass
from typing import Optional

# Step times the median is taken over: the recent ones, so a run that slows down (longer completions) follows.
WINDOW = 100


@dataclass(frozen=True)
class StallPolicy:
    factor: float = 10.0  # health_stall_factor
    min_s: float = 300.0  # health_stall_min_s
    startup_s: float = 1800.0  # health_startup_s


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    reason: str  # one line

    @property
    def status(self) -> int:
        return 200 if self.healthy else 503


def seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"


class StepClock:
    """The step times and the last sign of progress of one run, safe to read from the HTTP server's threads."""

    def __init__(self, policy: StallPolicy, now: float):
        self.policy = policy
        self.started = now
        self.last_progress: Optional[float] = None  # the last finished step, save or evaluation batch
        self.last_step: Optional[int] = None
        self.durations: deque[float] = deque(maxlen=WINDOW)
        self.finished = False
        self._lock = threading.Lock()

    def step_finished(self, step: int, duration: float, now: float) -> None:
        with self._lock:
            self.durations.append(max(duration, 0.0))
            self.last_step, self.last_progress = step, now

    def progress(self, now: float) -> None:
        """Work between steps (a checkpoint, an evaluation batch): the run is alive; no step time is recorded."""
        with self._lock:
            if self.last_progress is not None:
                self.last_progress = now

    def finish(self) -> None:
        """Training is over (the final model is being saved): healthy from now on."""
        with self._lock:
            self.finished = True

    def median(self) -> Optional[float]:
        with self._lock:
            return statistics.median(self.durations) if self.durations else None

    def limit(self) -> Optional[float]:
        """Seconds without progress after which the run counts as stalled; None before the first step."""
        median = self.median()
        return None if median is None else max(self.policy.factor * median, self.policy.min_s)

    def verdict(self, now: float) -> Verdict:
        with self._lock:
            finished, last_step, last_progress = self.finished, self.last_step, self.last_progress
        if finished:
            return Verdict(True, f"ok: training finished at step {last_step}")
        if last_progress is None:
            return self._starting(now)
        idle, limit, median = now - last_progress, self.limit(), self.median()
        why = (f"{seconds(limit)}: health_stall_factor {self.policy.factor:g} x median step time {seconds(median)}, "
               f"at least health_stall_min_s {self.policy.min_s:g}")
        if idle > limit:
            return Verdict(False, f"stalled: no step finished for {seconds(idle)} after step {last_step} (limit {why})")
        return Verdict(True, f"ok: step {last_step}, last progress {seconds(idle)} ago (limit {why})")

    def _starting(self, now: float) -> Verdict:
        waited = now - self.started
        if waited > self.policy.startup_s:
            return Verdict(False, f"stalled: no step finished in {seconds(waited)} since the start "
                                  f"(health_startup_s {self.policy.startup_s:g})")
        return Verdict(True, f"starting: no step finished yet, {seconds(waited)} since the start "
                             f"(health_startup_s {self.policy.startup_s:g})")
