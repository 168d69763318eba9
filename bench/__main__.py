"""`python -m bench`: run the benchmarks and rewrite bench/RESULTS.md with what they measured."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from imagegen_contract import atomic

from . import (arm64, bytecode, cache, cold_start, cuda_wheels, data_scale, engines, examples, lock_install, lock_time,
               machine, operations, overhead, pulls, render_time, reproducible, rewards, serve_abuse, size,
               slurm)
from .common import REPO

# Each section's module; its text starts "## N. Title", N being its place here.
SECTIONS = {"cache": cache, "size": size, "trainer": overhead, "render": render_time, "lock": lock_install,
            "arm64": arm64, "examples": examples, "data": data_scale, "slurm": slurm, "operations": operations,
            "cold": cold_start, "locks": lock_time, "wheels": cuda_wheels, "pulls": pulls, "rewards": rewards,
            "engines": engines, "serve": serve_abuse, "bytecode": bytecode,
            "reproducible": reproducible}


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run these sections and keep the others' last results (default: all; cache, size, "
                        "lock, arm64 and cold build or push images, minutes each; slurm starts a Slurm cluster in "
                        "containers)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per trainer-overhead run")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    return parser.parse_args(argv)


def run_section(name: str, work: Path, steps: int) -> str:
    directory = work / name
    directory.mkdir()
    print(f"bench: {name} ...", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    module = SECTIONS[name]
    text = module.section(directory, steps) if module in (overhead, operations) else module.section(directory)
    # The machine may be shared: the load says how much else was running.
    return text + f"\n\n_Load average (1 min) at the start of this section: {load:.2f}; at its end: {os.getloadavg()[0]:.2f}._"


def earlier_sections(results: Path) -> dict[str, str]:
    """The sections of an earlier RESULTS.md by their "## N." heading, each with its own machine line; a section
    whose heading has no number (GPU verification, written by hand from trainer/scripts/verify_gpu.py's result)
    under its whole heading."""
    if not results.exists():
        return {}
    parts = ("\n" + results.read_text()).split("\n## ")[1:]
    return {section_key(part): "## " + part.strip() for part in parts}


def section_key(part: str) -> str:
    heading = part.split("\n", 1)[0]
    number = heading.split(".", 1)[0]
    return number if number.isdigit() else heading


def main(argv: list[str]) -> None:
    """Writes RESULTS.md after each section, so a section that fails keeps the ones before it."""
    options = arguments(argv)
    started = time.monotonic()
    kept = earlier_sections(options.results)
    ran: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="imagegen-bench-") as work:
        for name in (name for name in SECTIONS if name in options.only):
            ran[name] = (run_section(name, Path(work), options.steps) + "\n\n_"
                         + machine.section().replace("\n\n", " ") + "_")
            write_results(options.results, ran, kept, time.monotonic() - started)
    print(f"bench: wrote {options.results}", file=sys.stderr)


def write_results(results: Path, ran: dict[str, str], kept: dict[str, str], seconds: float) -> None:
    sections = [ran.get(name) or kept.get(str(place)) for place, name in enumerate(SECTIONS, 1)]
    # Sections no benchmark writes are kept as they are, after the measured ones.
    sections += [text for key, text in kept.items() if not key.isdigit()]
    header = ["# Benchmarks", "",
              "Written by `.venv/bin/python -m bench [--only SECTION ...]`: one run of each measurement, numbers "
              "as measured; each section says when, on what and at which revision it ran. Last run: "
              f"{' '.join(ran)}, {seconds:.0f} s."]
    atomic.write_text(results, "\n\n".join(["\n".join(header), *filter(None, sections)]) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
