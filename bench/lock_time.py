"""Section 12: what locking each image costs (uv resolving from the package index, every platform of the image),
and the size of every image this machine builds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .cache import snapshot_inputs
from .common import DOCKER, IMAGEGEN, gb, run, table
from .cpu_image import build_image


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


def local_images(inputs: Path) -> list[str]:
    """The matrix's images on a base of their own (Debian's), which this machine builds; the others need nvidia/cuda."""
    from imagegen.workspace import Workspace

    plan = Workspace(matrix=inputs / "matrix.yaml", trainer=inputs / "trainer").load()
    return sorted({image.name for image in plan.images if image.gpu.cuda is None and image.key in plan.locked})


def built_images(inputs: Path, work: Path) -> list[tuple]:
    """Each image of local_images built for linux/amd64 (a whole `imagegen build`, from the engine's build cache
    where it holds the layers), with its build time, size and layers."""
    rows = []
    for name in local_images(inputs):
        build = build_image(name, f"build-{name}", work, "--matrix", str(inputs / "matrix.yaml"), "--trainer",
                            str(inputs / "trainer"))
        facts = json.loads(subprocess.run([DOCKER, "image", "inspect", build.report["image_id"]], capture_output=True,
                                          text=True, check=True).stdout)[0]
        rows.append((name, f"{facts['Os']}/{facts['Architecture']}", f"{build.wall_s:.0f}", gb(facts["Size"]),
                     len(facts["RootFS"]["Layers"])))
    return rows


def section(work: Path) -> str:
    inputs = snapshot_inputs(work)
    rows = lock_rows(inputs, work)
    total = sum(float(row[1]) for row in rows)
    sizes = built_images(inputs, work)
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
        "them), each built by `imagegen build` for linux/amd64 from this engine's build cache where it held their "
        "layers (a cold build downloads their wheels: `build s` says which):",
        "",
        table(("image", "platform", "build s", "size", "layers"), sizes),
    ])
