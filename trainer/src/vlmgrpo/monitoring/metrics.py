"""What a run's metrics.jsonl holds and its stdout line shows (a command's MetricsView), and the helpers that write
them; the callback that calls them is callbacks.MetricsLogger. No transformers import: commands declare their view
without loading it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from imagegen_contract import atomic


@dataclass(frozen=True)
class MetricsView:
    """Which of a trainer's log keys go to metrics.jsonl (under which names), and what its stdout line shows."""

    keys: dict[str, str]  # log key -> name in metrics.jsonl
    eval_keys: tuple[str, ...]  # keys of an evaluation's logs (Trainer.evaluate) kept as they are
    shown: tuple[tuple[str, str], ...]  # (label, metrics name) on the stdout line; the label "[]" shows the rewards


def clean(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def gpu_memory_peak_gib():
    """The most GPU memory this process's tensors have held since the last call (torch.cuda.max_memory_allocated,
    then reset): the peak of the steps one metrics line covers. None on the CPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return round(peak / 2**30, 3)


def number(value, spec=".3g") -> str:
    return "-" if value is None else format(value, spec)


def drop_steps_after(path: Path, step: int) -> None:
    """Keep the JSON lines of steps up to `step`: a run resumed from that step logs the later ones again."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
    if len(kept) != len(lines):
        atomic.write_text(path, "".join(kept))


def rewards_of(logs: dict, prefix: str) -> dict:
    return {key.split("/")[1]: clean(value) for key, value in logs.items()
            if key.startswith(f"{prefix}/") and key.endswith("/mean")}


def format_line(record: dict, max_steps: int, view: MetricsView) -> str:
    """The stdout line of one metrics.jsonl record."""
    shown = [bracketed(record.get(name, {})) if label == "[]" else f"{label}={number(record.get(name))}"
             for label, name in view.shown]
    return f"step {record['step']}/{max_steps} {' '.join(shown)} time={number(record.get('step_time'))}s"


def bracketed(rewards: dict) -> str:
    return "[" + " ".join(f"{name}={number(value)}" for name, value in rewards.items()) + "]"
