"""The image list as a table for people, JSON for programs, or a GitHub Actions matrix."""

from __future__ import annotations

import json

from imagegen.core import platforms
from imagegen.matrix.components import COMPONENTS
from imagegen.matrix.plan import ImageSpec

# How a component's cell reads where the bare version would hide something users check.
CELL = {
    "torch": lambda s: f"{s.torch}+cu{s.torch_cuda.replace('.', '')}" + ("" if s.torch_index_url else " (PyPI)"),
    "flash_attn": lambda s: (s.flash_attn or "none") + (" (source)" if s.flash_attn_source_build else ""),
}


def _cell(key: str):
    return CELL.get(key, lambda spec: getattr(spec, key) or "none")


# What users check, one column each; the table and the report page show the same.
VERSION_COLUMNS = (("CUDA", lambda s: s.cuda or "none"),
                   *((c.title, _cell(c.key)) for c in COMPONENTS if c.column))
COLUMNS = (("image", lambda s: s.name), ("platform", lambda s: s.platform), *VERSION_COLUMNS,
           ("tag", lambda s: s.version_tag or "(no lock)"))


def table(specs: list[ImageSpec]) -> str:
    rows = [[name for name, _ in COLUMNS]] + [[cell(spec) for _, cell in COLUMNS] for spec in specs]
    return "\n".join(aligned(rows))


def aligned(rows: list) -> list[str]:
    """Rows of text cells as lines with aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def as_json(specs: list[ImageSpec]) -> str:
    return json.dumps([spec.as_dict() for spec in specs], indent=2)


def github(specs: list[ImageSpec]) -> str:
    """One line a workflow reads with fromJSON into strategy.matrix: one job per image and platform,
    each on a runner of that platform (no emulation in publication)."""
    include = [{"image": s.name, "platform": s.platform, "arch": platforms.ARCH[s.platform],
                "key": s.key, "cuda": s.cuda_minor or "none", "torch": s.torch, "python": s.python,
                "tag": s.version_tag, "gpu": s.cuda is not None, "platforms": len(s.platforms)} for s in specs]
    return json.dumps({"include": include}, separators=(",", ":"))


def github_indexes(specs: list[ImageSpec]) -> str:
    """The images of several platforms, whose index a workflow merges once every platform passed."""
    names = list(dict.fromkeys(s.name for s in specs if len(s.platforms) > 1))
    return json.dumps({"include": [{"image": name} for name in names]}, separators=(",", ":"))


FORMATS = {"table": table, "json": as_json, "github": github, "github-indexes": github_indexes}
