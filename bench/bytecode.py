"""Section 18: what the image's bytecode saves at each start.

The cpu image is built by `imagegen build`; its trainer layer writes the bytecode of what a run imports
(vlmgrpo.commands.bytecode), which the image's user could not write at run time. The same image is then started with
it and without it (PYTHONPYCACHEPREFIX pointing at an empty directory, writing none: Python finds no bytecode there
and compiles every source it imports, as in an image built before), alternated: a process that imports torch,
transformers and TRL, and `docker run IMAGE train` to its first step of the tiny model. The size is that of every
bytecode file under /opt/venv."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from statistics import fmean

from .cold_start import first_step, inputs
from .common import DOCKER, gb, section_main, table
from .cpu_image import build_image

ROUNDS = int(os.environ.get("BENCH_BYTECODE_ROUNDS", "3"))
WITHOUT = ("-e", "PYTHONPYCACHEPREFIX=/tmp/no-bytecode", "-e", "PYTHONDONTWRITEBYTECODE=1")
IMPORTS = "import torch, transformers, trl; from trl import GRPOTrainer"


def imports_s(ref: str, options: tuple[str, ...]) -> float:
    started = time.monotonic()
    subprocess.run([DOCKER, "run", "--rm", "--network", "none", *options, "--entrypoint", "python", ref, "-c", IMPORTS],
                   check=True, capture_output=True)
    return time.monotonic() - started


def bytecode_bytes(ref: str) -> int:
    found = subprocess.run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "sh", ref, "-c",
                            "find /opt/venv -name '*.pyc' -print0 | du -cb --files0-from=- | tail -1"],
                           check=True, capture_output=True, text=True).stdout
    return int(found.split()[0])


def section(work: Path, images: tuple[str, ...] = ("cpu",)) -> str:
    (image,) = images
    build = build_image(image, image, work)
    ref, data = build.report["ref"], inputs(work)
    found = {variant: {"imports": [], "step": []} for variant in ("with", "without")}
    for _ in range(ROUNDS):
        for variant, options in (("with", ()), ("without", WITHOUT)):
            found[variant]["imports"].append(imports_s(ref, options))
            found[variant]["step"].append(first_step(ref, data, work, os.environ.copy(), options)[0])
    rows = [(image, variant, ", ".join(f"{s:.1f}" for s in parts["imports"]), f"{fmean(parts['imports']):.1f}",
             ", ".join(f"{s:.1f}" for s in parts["step"]), f"{fmean(parts['step']):.1f}")
            for variant, parts in found.items()]
    ratio = {part: fmean(found["with"][part]) / fmean(found["without"][part]) for part in ("imports", "step")}
    return "\n".join([
        "## 18. Bytecode in the image: the start of every process",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + f" Rounds: {ROUNDS}.",
        "",
        table(("image", "bytecode", "import s", "import s (mean)", "to step 1 s", "to step 1 s (mean)"), rows),
        "",
        f"- With the bytecode: imports in {ratio['imports']:.2f} of the time without, the first step in "
        f"{ratio['step']:.2f}; the bytecode under /opt/venv is {gb(bytecode_bytes(ref))} of the image's "
        f"{gb(build.report['size_bytes'])}.",
    ])


if __name__ == "__main__":  # python -m bench.bytecode DIR: this section alone, printed
    section_main(section, ("cpu",))
