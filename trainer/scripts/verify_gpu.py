#!/usr/bin/env python3
"""Verify vlmgrpo on a GPU machine, outside Docker, with that machine's own torch; record what was measured.

    python trainer/scripts/verify_gpu.py [--wheelhouse DIR ...] [--steps 20] [--out docs/gpu-verification.md]

1. checks that the interpreter (--python, default this one) has a torch that sees a GPU;
2. installs the trainer from this checkout with pip, taking missing wheels from --wheelhouse directories only
   (--no-index) when any are given; torch is not a trainer dependency, so pip leaves the machine's torch alone;
3. runs `vlmgrpo selftest --require-gpu` (GPU visible, bf16 matmul, NCCL all-reduce, flash-attn against SDPA,
   DeepSpeed ops, and two GRPO steps);
4. makes a tiny Qwen2.5-VL locally and trains it for --steps GRPO steps in bf16, timing every step;
5. writes date, hardware, versions, steps/s, peak GPU memory and every check's result to --out (temp file, then
   rename), and exits 0 when every check passed, 1 when one failed, 2 when it cannot run (no GPU, bad arguments).

Only the standard library is used here: the trainer may not be installed yet when it starts.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

TRAINER = Path(__file__).resolve().parents[1]
REPORT = TRAINER.parent / "docs" / "gpu-verification.md"
PASS, FAIL, SKIP = "pass", "fail", "skip"
TIMEOUT_S = 3600

# What the script asks torch about the machine, run in the target interpreter.
PROBE = """
import json, torch
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": [
    {"name": torch.cuda.get_device_name(i), "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1),
     "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))} for i in range(count)],
    "bf16": bool(count and torch.cuda.is_bf16_supported())}))
"""


class CannotRun(Exception):
    """The verification cannot start: no GPU, no torch, bad arguments. Exit 2 with this message."""


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter whose torch is verified (default: the one running this script)")
    parser.add_argument("--wheelhouse", action="append", default=[], metavar="DIR",
                        help="directory of wheels for missing dependencies; repeatable; with any, pip uses no index")
    parser.add_argument("--no-install", action="store_true", help="use the vlmgrpo already installed")
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps of the bf16 run (default 20)")
    parser.add_argument("--completion-length", type=int, default=64,
                        help="max_completion_length of the bf16 run (default 64)")
    parser.add_argument("--out", type=Path, default=REPORT, help=f"report to write (default {REPORT})")
    parser.add_argument("--work-dir", type=Path, default=None, help="where the tiny model and run go (default: temp)")
    args = parser.parse_args(argv)
    if args.completion_length < 1:
        raise CannotRun(f"--completion-length {args.completion_length}: at least 1 token")
    if args.steps < 2:
        raise CannotRun(f"--steps {args.steps}: at least 2 (the first step's time is warm-up, not measured)")
    for directory in args.wheelhouse:
        if not Path(directory).is_dir():
            raise CannotRun(f"--wheelhouse {directory}: no such directory")
    if not args.out.parent.is_dir():
        raise CannotRun(f"--out {args.out}: the directory {args.out.parent} does not exist")
    return args


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, **kwargs)


def probe_machine(python: str) -> dict:
    try:
        result = run([python, "-c", PROBE])
    except OSError as exc:
        raise CannotRun(f"--python {python}: cannot run it ({exc.strerror})") from None
    if result.returncode:
        raise CannotRun(f"{python} cannot import torch: {result.stderr.strip().splitlines()[-1:]}; install the "
                        "machine's torch build first (this script never installs torch)")
    machine = json.loads(result.stdout.strip().splitlines()[-1])
    if not machine["gpus"]:
        raise CannotRun(f"no GPU visible to torch {machine['torch']} in {python}: this script verifies a GPU machine")
    return machine


def install_command(python: str, wheelhouses: list[str]) -> list[str]:
    """pip install the trainer; with wheelhouses, from them alone. torch is no dependency, so it stays as it is."""
    sources = ["--no-index", *[f"--find-links={d}" for d in wheelhouses]] if wheelhouses else []
    return [python, "-m", "pip", "install", "--quiet", *sources, str(TRAINER)]


def selftest(python: str) -> list[dict]:
    result = run([python, "-m", "vlmgrpo", "selftest", "--require-gpu"])
    try:
        return json.loads(result.stdout)["checks"]
    except (ValueError, KeyError):
        return [check("selftest", FAIL, f"exit {result.returncode}: {result.stderr.strip()[-500:]}")]


def check(name: str, status: str, detail: str) -> dict:
    return {"name": name, "status": status, "detail": detail}


def train_command(python: str, tiny: dict, output: Path, steps: int, completion_length: int) -> list[str]:
    return [python, "-m", "vlmgrpo", "train", "--model", tiny["model"], "--data", tiny["data"], "--image-root",
            tiny["image_root"], "--output", str(output), "--max-steps", str(steps), "--save-steps", str(steps),
            "--num-generations", "4", "--batch-size", "8", "--max-completion-length", str(completion_length),
            "--set", "bf16=true", "--set", "dtype=bfloat16", "--set", "gradient_accumulation_steps=1",
            "--set", "report_to=none"]


def measure(rows: list[dict], steps: int, seconds: float) -> dict:
    """From metrics.jsonl: steps/s over the steps after the first (warm-up), the peak GPU memory of any step."""
    train_rows = [row for row in rows if "reward" in row]
    times = [row["step_time"] for row in train_rows[1:] if row.get("step_time")]
    peaks = [row["gpu_memory_peak_gib"] for row in train_rows if row.get("gpu_memory_peak_gib") is not None]
    return {
        "steps": len(train_rows),
        "steps_expected": steps,
        "steps_per_second": round(1 / statistics.mean(times), 3) if times else None,
        "seconds_per_step": round(statistics.mean(times), 3) if times else None,
        "peak_memory_gib": max(peaks) if peaks else None,
        "wall_seconds": round(seconds, 1),
        "final_loss": train_rows[-1].get("loss") if train_rows else None,
    }


def train_checks(measured: dict, exit_code: int, output: Path) -> list[dict]:
    steps = f"{measured['steps']} of {measured['steps_expected']} steps logged"
    return [
        check("train.bf16_grpo.exit", PASS if exit_code == 0 else FAIL, f"exit code {exit_code}"),
        check("train.bf16_grpo.steps", PASS if measured["steps"] == measured["steps_expected"] else FAIL, steps),
        check("train.bf16_grpo.loss_finite", PASS if isinstance(measured["final_loss"], (int, float)) else FAIL,
              f"last loss {measured['final_loss']}"),
        check("train.bf16_grpo.model_saved", PASS if (output / "model.safetensors").is_file() else FAIL,
              str(output / "model.safetensors")),
    ]


def tiny_grpo(python: str, work: Path, steps: int, completion_length: int) -> tuple[dict, list[dict]]:
    made = run([python, "-m", "vlmgrpo", "make-tiny", "--out", str(work / "tiny"), "--rows", "64"])
    if made.returncode:
        return {}, [check("train.make_tiny", FAIL, made.stderr.strip()[-500:])]
    tiny = json.loads(made.stdout.strip().splitlines()[-1])
    output = work / "run"
    started = time.monotonic()
    result = run(train_command(python, tiny, output, steps, completion_length))
    seconds = time.monotonic() - started
    metrics = output / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    measured = measure(rows, steps, seconds)
    checks = train_checks(measured, result.returncode, output)
    if result.returncode:
        checks[0]["detail"] += f": {result.stderr.strip()[-500:]}"
    return measured, checks


def render_report(results: dict) -> str:
    """The markdown of docs/gpu-verification.md from one run's results."""
    machine, measured, checks = results["machine"], results["measured"], results["checks"]
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']} GiB, sm {g['capability']})" for g in machine["gpus"])
    failed = [c for c in checks if c["status"] == FAIL]
    versions = ", ".join(f"{key} {value}" for key, value in results["versions"].items() if value)

    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [
        "# GPU verification",
        "",
        "Written by `trainer/scripts/verify_gpu.py` (run it on a GPU machine; it rewrites this file).",
        "",
        f"- Date: {results['date']}",
        f"- Hardware: {len(machine['gpus'])} x {gpus}; host {results['host']}",
        f"- torch {machine['torch']} (CUDA {machine['cuda']}), bf16 {'supported' if machine['bf16'] else 'not supported'}",
        f"- Versions: {versions}",
        f"- Result: {'all checks passed' if not failed else f'{len(failed)} check(s) failed'} "
        f"({sum(c['status'] == PASS for c in checks)} passed, {len(failed)} failed, "
        f"{sum(c['status'] == SKIP for c in checks)} skipped)",
        "",
        f"## {measured.get('steps_expected', '?')}-step bf16 GRPO run on a tiny Qwen2.5-VL made locally",
        "",
        "| measure | value |",
        "|---|---|",
        f"| steps/s (steps 2 onward) | {measured.get('steps_per_second')} |",
        f"| seconds per step | {measured.get('seconds_per_step')} |",
        f"| peak GPU memory (torch.cuda.max_memory_allocated) | {measured.get('peak_memory_gib')} GiB |",
        f"| wall time, start-up included | {measured.get('wall_seconds')} s |",
        "",
        "## Checks",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *[f"| {c['name']} | {c['status']} | {cell(c['detail'])[:300]} |" for c in checks],
        "",
    ]
    return "\n".join(lines)


def write_report(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as stream:
        stream.write(text)
    os.replace(stream.name, path)


def versions(python: str) -> dict:
    result = run([python, "-m", "vlmgrpo", "info"])
    try:
        return json.loads(result.stdout)["versions"]
    except (ValueError, KeyError):
        return {}


def verify(args: argparse.Namespace) -> int:
    machine = probe_machine(args.python)
    if not args.no_install:
        installed = run(install_command(args.python, args.wheelhouse))
        if installed.returncode:
            raise CannotRun(f"installing the trainer failed: {installed.stderr.strip()[-800:]}")
    checks = selftest(args.python)
    with tempfile.TemporaryDirectory(prefix="vlmgrpo-gpu-") as scratch:
        work = args.work_dir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        measured, train = tiny_grpo(args.python, work, args.steps, args.completion_length)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.node()}, {os.cpu_count()} CPUs",
        "machine": machine,
        "versions": versions(args.python),
        "measured": measured,
        "checks": checks + train,
    }
    write_report(args.out, render_report(results))
    failed = [c["name"] for c in results["checks"] if c["status"] == FAIL]
    print(f"wrote {args.out}: " + (f"failed: {', '.join(failed)}" if failed else "all checks passed"))
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    try:
        return verify(parse_args(argv))
    except CannotRun as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
