"""Section 12: what locking each image costs (uv resolving from the package index, every platform of the image),
and the size of every image this machine builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .cache import snapshot_inputs
from .common import DOCKER, IMAGEGEN, gb, run, table


def lockable(inputs: Path) -> list[str]:
    """The images of the matrix that lock here (from PyPI): those with a lock file."""
    return sorted(path.stem for path in (inputs / "locks").glob("*.json"))


def lock_rows(inputs: Path, work: Path) -> list[tuple]:
    rows = []
    for name in lockable(inputs):
        seconds = run([*IMAGEGEN, "lock", "--matrix", str(inputs / "matrix.yaml"), "--trainer",
                       str(inputs / "trainer"), "--image", name], log=work / f"lock-{name}.log")
        platforms = json.loads((inputs / "locks" / f"{name}.json").read_text())["platforms"]
        counts = ", ".join(f"{platform.split('/')[1]} {len(lock['packages'])}" for platform, lock in platforms.items())
        rows.append((name, f"{seconds:.1f}", counts))
    return rows


def built_images() -> list[tuple]:
    """Every image of the cpu line in the engine (the ones this machine builds), with its size."""
    listed = subprocess.run([DOCKER, "images", "--format", "{{.Repository}}:{{.Tag}}\t{{.ID}}",
                             "ghcr.io/imagegen/vlm-grpo"], capture_output=True, text=True, check=True).stdout
    seen, rows = set(), []
    for line in sorted(listed.splitlines()):
        ref, image_id = line.split("\t")
        if image_id in seen or not ref.endswith(("cpu", "cpu-arm64")):
            continue
        seen.add(image_id)
        facts = json.loads(subprocess.run([DOCKER, "image", "inspect", image_id], capture_output=True, text=True,
                                          check=True).stdout)[0]
        rows.append((ref.rsplit(":", 1)[1], f"{facts['Os']}/{facts['Architecture']}", gb(facts["Size"]),
                     len(facts["RootFS"]["Layers"])))
    return rows


def section(work: Path) -> str:
    inputs = snapshot_inputs(work)
    rows = lock_rows(inputs, work)
    total = sum(float(row[1]) for row in rows)
    sizes = built_images()
    return "\n".join([
        "## 12. Locking each image, and the size of each image built here",
        "",
        "`imagegen lock --image NAME` on a copy of the matrix, its locks and the trainer, one image after the "
        "other, each a whole command (uv resolving every platform of the image from PyPI through this machine's "
        "proxy). The images whose torch only the PyTorch index serves lock where it answers, not here.",
        "",
        table(("image", "lock s", "packages per platform"), rows),
        "",
        f"- {len(rows)} images in {total:.0f} s, {total / max(len(rows), 1):.1f} s per image.",
        "",
        "The images this machine builds (the CUDA images need nvidia/cuda bases, which it cannot pull; CI builds "
        "them), as the engine holds them now:",
        "",
        table(("tag", "platform", "size", "layers"), sizes) if sizes else "(none in the engine when this ran)",
    ])
