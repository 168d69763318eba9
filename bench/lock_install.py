"""Section 5: a cold build of the cpu image three ways, in one run: as it was before imagegen had
locks (pip resolving the stack inside the build), from the lock installed by pip, and from the lock
installed by uv (today's)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .cache import make_cold, options, snapshot_inputs
from .common import BASE_IMAGE, IMAGEGEN, REPO, WHEELHOUSE, docker, run, table
from .cpu_image import CpuBuild, build_cpu

BEFORE_LOCKS = "b4a3551"  # the last commit whose builds resolved the stack with pip at build time
LOCK_WITH_PIP = "dfe17f8"  # the last commit whose builds installed the lock with pip


def empty_staging(work: Path, name: str) -> dict:
    """The environment for a build whose context staging area (imagegen's, under XDG_CACHE_HOME) starts
    empty, as on a new machine; the revisions also lay that area out differently."""
    return {**os.environ, "XDG_CACHE_HOME": str(work / f"{name}-cache")}


def build_at(revision: str, name: str, work: Path, *arguments: str) -> CpuBuild:
    """`imagegen build --image cpu` as it was at revision, from an export of that commit (its own
    matrix, locks, templates and trainer); the image it made is removed afterwards."""
    source = work / revision
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    report = work / f"{revision}.json"
    # `python -m imagegen` in that directory imports its imagegen.
    wall = run([*IMAGEGEN, "build", "--image", "cpu", *arguments, "--base-image", BASE_IMAGE,
                "--wheelhouse", str(WHEELHOUSE), "--report", str(report), "--context-dir", str(work / f"{revision}-ctx")],
               log=work / f"{revision}.log", cwd=source, env=empty_staging(work, revision))
    (entry,) = json.loads(report.read_text())["images"]
    docker("rmi", "--force", entry["image_id"])
    return CpuBuild(name, wall, entry, [])


def _layer_times(build: CpuBuild) -> str:
    return ", ".join(f"{layer['layer']} {layer['duration_s']:.1f}" for layer in build.report["layers"])


def section(work: Path) -> str:
    inputs = snapshot_inputs(work)
    make_cold()
    before = build_at(BEFORE_LOCKS, f"before locks ({BEFORE_LOCKS}): pip resolves in the build", work)
    make_cold()
    pip = build_at(LOCK_WITH_PIP, f"from the lock, pip ({LOCK_WITH_PIP})", work, "--platform", "linux/amd64")
    make_cold()
    uv = build_cpu("from the lock, uv (today)", work, *options(inputs), env=empty_staging(work, "today"))
    rows = [(build.name, f"{build.wall_s:.1f}", f"{build.wall_s / before.wall_s:.0%}",
             f"{build.wall_s / pip.wall_s:.0%}", _layer_times(build), f"{build.report['size_bytes'] / 1e9:.2f} GB")
            for build in (before, pip, uv)]
    return "\n".join([
        "## 5. Installing from the lock, with pip and with uv (cpu image, cold)",
        "",
        "Three cold builds (`docker builder prune -af`, the images removed and an empty context staging area before "
        "each), from the local base "
        "and wheelhouse, each the whole `imagegen build` command: the build as it was before locks (pip "
        "resolving transformers, TRL and the rest inside the build, torch in a step of its own); the lock "
        "installed by pip, each step one `pip install --no-deps --require-hashes` of part of `locks/cpu.json` "
        "(the wheelhouse handed over as a page of links with their sha256); and today's build, pip installing "
        "uv from the lock and uv installing every other step (`uv pip install --no-deps --require-hashes`, "
        "the wheelhouse as the first of its indexes). Both older builds run from `git archive` of their commit.",
        "",
        table(("build", "wall s", "of before locks", "of lock + pip", "build s per layer", "size"), rows),
    ])
