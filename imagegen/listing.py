"""The image list as a table for people, JSON for programs, or a GitHub Actions matrix."""

from __future__ import annotations

import json
from dataclasses import asdict

from .plan import ImageSpec

# What users check, one column each; the table and the report page show the same.
COMPONENTS = (
    ("CUDA", lambda s: s.cuda or "none"),
    ("torch", lambda s: f"{s.torch}+cu{s.torch_cuda.replace('.', '')}" + ("" if s.torch_index_url else " (PyPI)")),
    ("Python", lambda s: s.python),
    ("cuDNN", lambda s: s.cudnn),
    ("NCCL", lambda s: s.nccl),
    ("flash-attn", lambda s: (s.flash_attn or "none") + (" (source)" if s.flash_attn_source_build else "")),
    ("DeepSpeed", lambda s: s.deepspeed or "none"),
    ("transformers", lambda s: s.transformers),
    ("TRL", lambda s: s.trl),
)
COLUMNS = (("image", lambda s: s.name), *COMPONENTS, ("tag", lambda s: s.version_tag))


def table(specs: list[ImageSpec]) -> str:
    rows = [[name for name, _ in COLUMNS]] + [[cell(spec) for _, cell in COLUMNS] for spec in specs]
    return "\n".join(aligned(rows))


def aligned(rows: list) -> list[str]:
    """Rows of text cells as lines with aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def as_json(specs: list[ImageSpec]) -> str:
    return json.dumps([asdict(spec) for spec in specs], indent=2)


def github(specs: list[ImageSpec]) -> str:
    """One line a workflow reads with fromJSON into strategy.matrix."""
    include = [{"image": s.name, "cuda": s.cuda_minor or "none", "torch": s.torch, "python": s.python,
                "tag": s.version_tag, "gpu": s.cuda is not None} for s in specs]
    return json.dumps({"include": include}, separators=(",", ":"))


FORMATS = {"table": table, "json": as_json, "github": github}
