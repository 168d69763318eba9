"""The image list as a table for people, JSON for programs, or a GitHub Actions matrix: one row per platform
of each image, its versions (as its lock pins them once locked), its state and its tag."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Mapping

from imagegen.core import platforms
from imagegen.core.text import aligned
from imagegen.matrix.components import Components
from imagegen.matrix.plan import PlannedImage
from imagegen.render.locked import LockedImage
from imagegen.workspace import Plan


@dataclass(frozen=True)
class Listed:
    """One platform of one image as listings show it: planned, and locked when it is."""

    plan: PlannedImage
    locked: LockedImage | None
    state: str  # "locked", "no lock", "needs the PyTorch index"
    table: Components  # the matrix's components: the columns of a listing

    @property
    def versions(self) -> Mapping[str, str | None]:
        return self.locked.versions if self.locked else self.plan.versions

    @property
    def tag(self) -> str:
        return self.locked.version_tag if self.locked else f"({self.state})"


def listed(plan: Plan, chosen: list[PlannedImage]) -> list[Listed]:
    return [Listed(p, plan.locked.get(p.key), plan.state(p), plan.matrix.components) for p in chosen]


# How a component's cell reads where the bare version would hide something users check.
CELL: dict[str, Callable[[Listed], str]] = {
    "torch": lambda row: f"{row.versions['torch']}+cu{row.versions['torch_cuda'].replace('.', '')}"
                         + ("" if row.plan.torch.index_url else " (PyPI)"),
    "flash_attn": lambda row: (row.versions.get("flash_attn") or "none")
                              + (" (source)" if row.plan.kernels.flash_attn_source_build else ""),
}


def version_columns(table: Components) -> list[tuple[str, Callable[[Listed], str]]]:
    """What users check, one column each; the table and the report page show the same."""
    def cell(key: str) -> Callable[[Listed], str]:
        return CELL.get(key, lambda row: row.versions.get(key) or "none")

    return [("CUDA", cuda_cell), *((c.title, cell(c.key)) for c in table if c.column)]


def cuda_cell(row: Listed) -> str:
    """The image's CUDA and where it comes from: nvidia/cuda's toolkit (12.4.1), or NVIDIA's wheels (13.0 (wheels))."""
    if row.plan.gpu.cuda is None:
        return "none"
    return row.plan.gpu.cuda + (" (wheels)" if row.plan.gpu.cuda_source == "wheels" else "")


def columns(table: Components) -> list[tuple[str, Callable[[Listed], str]]]:
    return [("image", lambda row: row.plan.name), ("platform", lambda row: row.plan.platform),
            *version_columns(table), ("tag", lambda row: row.tag)]


def table(rows: list[Listed]) -> str:
    chosen = columns(rows[0].table)
    cells = [[name for name, _ in chosen]] + [[cell(row) for _, cell in chosen] for row in rows]
    return "\n".join(aligned(cells))


def as_json(rows: list[Listed]) -> str:
    return json.dumps([{**(row.locked.as_dict() if row.locked else row.plan.as_dict()), "state": row.state}
                       for row in rows], indent=2)


def github(rows: list[Listed]) -> str:
    """One line a workflow reads with fromJSON into strategy.matrix: one job per locked image and platform,
    each on a runner of that platform (no emulation in publication). An image without a lock cannot be built,
    so it has no job: `imagegen validate` names it."""
    rows = [row for row in rows if row.locked]
    include = [{"image": r.plan.name, "platform": r.plan.platform, "arch": platforms.ARCH[r.plan.platform],
                "key": r.plan.key, "cuda": r.plan.gpu.cuda_minor or "none", "torch": r.versions["torch"],
                "python": r.versions["python"], "tag": r.locked.version_tag,
                "gpu": r.plan.gpu.cuda is not None, "platforms": len(r.plan.platforms)} for r in rows]
    return json.dumps({"include": include}, separators=(",", ":"))


def github_indexes(rows: list[Listed]) -> str:
    """The images of several platforms, whose index a workflow merges once every platform passed."""
    names = list(dict.fromkeys(r.plan.name for r in rows if r.locked and len(r.plan.platforms) > 1))
    return json.dumps({"include": [{"image": name} for name in names]}, separators=(",", ":"))


def markdown(rows: list[Listed]) -> str:
    """One row per image, its platforms together, for the documentation (docs/matrix.md's table is this, written by
    `python -m imagegen.reports.docs`): its versions as its lock pins them, and where it is locked, how many packages
    each platform's lock holds; no tag, which every relock changes."""
    chosen = [("image", lambda row: f"`{row.plan.name}`"), *version_columns(rows[0].table), ("lock", _lock_cell)]
    images = list({row.plan.name: row for row in rows}.values())
    arches = {name: ", ".join(platforms.ARCH[row.plan.platform] for row in rows if row.plan.name == name)
              for name in (row.plan.name for row in images)}
    header = ["image", "platforms", *(name for name, _ in chosen[1:])]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in images:
        cells = [chosen[0][1](row), arches[row.plan.name], *(cell(row) for _, cell in chosen[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _lock_cell(row: Listed) -> str:
    if not row.locked:
        return row.state
    return f"{len(row.locked.lock.packages)} packages"


FORMATS = {"table": table, "json": as_json, "github": github, "github-indexes": github_indexes, "markdown": markdown}
