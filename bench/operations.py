"""Section 10: what running for days costs: the restart after a killed worker, and serving metrics and health."""

from __future__ import annotations

import re
import signal
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from testbed.registry import free_port

from .common import REPO, VLMGRPO, table
from .overhead import Timed, make_inputs

STEP = re.compile(r"step (\d+)/")
SCRAPE_INTERVAL_S = 1.0  # Prometheus' default is 60 s, common settings 15-30 s: 1 s is the harshest case
RESTART_SAVE_STEPS = 5


class Scraper(threading.Thread):
    """Asks /metrics every SCRAPE_INTERVAL_S as Prometheus would, and counts the answers."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.url, self.answers, self.stop = f"http://127.0.0.1:{port}/metrics", 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SCRAPE_INTERVAL_S):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    self.answers += b"vlmgrpo_step" in answer.read()
            except OSError:
                pass  # not serving yet (the model is loading) or already gone


def metrics_cost(work: Path, config: Path) -> tuple[list[tuple], float, int]:
    """Runs without and with the port in turn, twice each, so that drift in what else the machine does (one run
    after the other) falls on both: the cost is the ratio of their mean medians."""
    runs, answers = [], 0
    for attempt in (1, 2):
        runs.append(Timed(f"without --metrics-port ({attempt})", [*VLMGRPO, "train", "--config", str(config),
                          "--output", str(work / f"out-plain-{attempt}")], STEP.pattern, work / f"plain-{attempt}.log"))
        port = free_port()
        scraper = Scraper(port)
        scraper.start()
        runs.append(Timed(f"with --metrics-port, scraped every {SCRAPE_INTERVAL_S:g} s ({attempt})",
                          [*VLMGRPO, "train", "--config", str(config), "--output", str(work / f"out-metrics-{attempt}"),
                           "--metrics-port", str(port)], STEP.pattern, work / f"metrics-{attempt}.log"))
        scraper.stop.set()
        answers += scraper.answers
    skip = 5
    rows = [(timed.name, f"{timed.startup_s:.2f}", f"{timed.steady_step_s(skip) * 1000:.1f}",
             f"{timed.median_step_s(skip) * 1000:.1f}", f"{timed.ended - timed.started:.1f}") for timed in runs]
    plain = statistics.mean(timed.median_step_s(skip) for timed in runs[0::2])
    served = statistics.mean(timed.median_step_s(skip) for timed in runs[1::2])
    return rows, served / plain - 1, answers


def restart_overhead(work: Path, config: Path, kill_after: int) -> dict:
    """Kills the worker once step `kill_after` is logged; times the kill to each later step line."""
    # as the trainer's restart test finds it; vlmgrpo loads trl, so only here
    from vlmgrpo.launch.torchrun import worker_of

    argv = [*VLMGRPO, "train", "--config", str(config), "--output", str(work / "out-restart"), "--max-restarts",
            "1", "--set", f"save_steps={RESTART_SAVE_STEPS}"]
    seen: dict[int, float] = {}
    killed_at = None
    with open(work / "restart.log", "w") as stderr:
        launcher = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True)
        for line in launcher.stdout:
            match = STEP.match(line)
            if not match:
                continue
            step, now = int(match.group(1)), time.monotonic()
            if killed_at is None and step == kill_after:
                worker_of(launcher.pid).send_signal(signal.SIGKILL)
                killed_at = now
            elif killed_at is not None and step not in seen:
                seen[step] = now - killed_at
    if launcher.wait() != 0:
        raise RuntimeError(f"the restarted run failed ({launcher.returncode}); log {work / 'restart.log'}")
    resumed_from = max(s for s in range(RESTART_SAVE_STEPS, kill_after + 1, RESTART_SAVE_STEPS))
    first_after = min(seen)
    return {"kill_after": kill_after, "resumed_from": resumed_from, "first_step": first_after,
            "to_first_step_s": seen[first_after], "to_killed_step_again_s": seen.get(kill_after + 1)}


def section(work: Path, steps: int) -> str:
    steps = max(min(steps, 100), 30)
    make_inputs(work, steps)
    config = work / "vlmgrpo.yaml"
    rows, cost, answers = metrics_cost(work, config)
    kill_after = RESTART_SAVE_STEPS * 2 + 2
    restart = restart_overhead(work, config, kill_after)
    steady_ms = float(rows[0][3])
    lost_steps = kill_after - restart["resumed_from"]
    return "\n".join([
        "## 10. Running for days: a restart, and metrics",
        "",
        f"The trainer-overhead section's tiny run (`max_steps={steps}`, same settings), `vlmgrpo train` on the host "
        "venv, each a whole process from its start. Metrics: the same run without and with `--metrics-port` in "
        f"turn, twice each, a client asking `/metrics` every {SCRAPE_INTERVAL_S:g} s as Prometheus would (it got "
        f"{answers} answers with the step in them); steady state from step 6.",
        "",
        table(("run", "start-up s", "ms per step (steady mean)", "ms per step (median)", "total s"), rows),
        "",
        f"- Metrics and health served and scraped: {cost:+.1%} on the median step time (the mean of each kind's "
        "two medians).",
        "",
        f"Restart: `--max-restarts 1`, a checkpoint every {RESTART_SAVE_STEPS} steps, the worker process killed "
        f"(SIGKILL) as soon as step {kill_after} is logged; torchrun restarts it, it resumes from "
        f"checkpoint-{restart['resumed_from']} and finishes the run.",
        "",
        table(("from the kill to", "s"), [
            (f"the first step logged after it (step {restart['first_step']})", f"{restart['to_first_step_s']:.1f}"),
            (f"a step beyond the killed one (step {kill_after + 1})",
             f"{restart['to_killed_step_again_s']:.1f}" if restart["to_killed_step_again_s"] else "-"),
        ]),
        "",
        f"- The restart costs {restart['to_first_step_s']:.1f} s to the first new step (a new process: imports, "
        f"model and checkpoint load) plus {lost_steps} step(s) done again ({lost_steps * steady_ms / 1000:.1f} s "
        f"at the steady {steady_ms:.0f} ms); a checkpoint every {RESTART_SAVE_STEPS} steps bounds the redone work.",
    ])


if __name__ == "__main__":  # a quick look without the rest of bench: python -m bench.operations DIR
    import sys
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    print(section(target, int(sys.argv[2]) if len(sys.argv) > 2 else 40))
