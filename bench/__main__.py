"""`python -m bench`: run the benchmarks and rewrite bench/RESULTS.md with what they measured."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from imagegen import atomic

from . import cache, machine, overhead, render_time, size
from .common import REPO

SECTIONS = ("cache", "size", "trainer", "render")


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run these sections (default: all; cache and size build images, minutes)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per trainer-overhead run")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    return parser.parse_args(argv)


def run_section(name: str, work: Path, steps: int) -> str:
    directory = work / name
    directory.mkdir()
    print(f"bench: {name} ...", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    if name == "cache":
        text = cache.section(directory)
    elif name == "size":
        text = size.section(directory)
    elif name == "trainer":
        text = overhead.section(directory, steps)
    else:
        text = render_time.section(directory)
    # The machine may be shared: the load says how much else was running.
    return text + f"\n\n_Load average (1 min) at the start of this section: {load:.2f}; at its end: {os.getloadavg()[0]:.2f}._"


def main(argv: list[str]) -> None:
    options = arguments(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="imagegen-bench-") as work:
        sections = [run_section(name, Path(work), options.steps) for name in SECTIONS if name in options.only]
    header = ["# Benchmarks", "",
              f"Written by `.venv/bin/python -m bench{'' if len(options.only) == len(SECTIONS) else ' --only ' + ' '.join(options.only)}`"
              f" in {time.monotonic() - started:.0f} s; one run of each measurement, numbers as measured.", "",
              machine.section()]
    atomic.write_text(options.results, "\n\n".join(["\n".join(header), *sections]) + "\n")
    print(f"bench: wrote {options.results}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
