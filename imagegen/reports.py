"""What build, test and push found, as plain data written to JSON reports.

These reports are the pipeline's record: `imagegen report` turns them into a page, CI
uploads them, and a user reads them instead of logs. Field names are a contract.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import atomic

PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class LayerResult:
    layer: str
    ref: str
    status: str  # "built" | "reused" (built earlier in this run) | "failed" | "not built"
    duration_s: float = 0.0
    cached_steps: int = 0
    total_steps: int = 0
    image_id: str | None = None


@dataclass
class BuildResult:
    image: str
    ref: str  # repository:version-tag
    status: str  # "built" | "failed" | "skipped"
    duration_s: float = 0.0
    size_bytes: int | None = None
    image_id: str | None = None
    failed_layer: str | None = None
    failed_step: str | None = None
    log_tail: list[str] = field(default_factory=list)
    log_file: str | None = None
    layers: list[LayerResult] = field(default_factory=list)
    hint: str = ""  # what to do about a failure imagegen recognises


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str = ""


@dataclass
class TestResult:
    image: str
    ref: str
    status: str  # "passed" | "failed"
    image_id: str | None = None  # push only publishes the image these checks ran on
    gpu_runtime: bool = False
    gpu_reason: str = ""
    duration_s: float = 0.0
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class PushResult:
    image: str
    registry: str
    repository: str
    status: str  # "pushed" | "refused" | "failed" | "not pushed"
    digest: str | None = None
    pushed_tags: list[str] = field(default_factory=list)
    already_published: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)  # {"tag": ..., "reason": ...}
    reason: str = ""


def write_json(path: Path, kind: str, results: list) -> None:
    """Write {"kind": ..., "images": [...]} atomically."""
    payload = {"kind": kind, "images": [asdict(result) for result in results]}
    atomic.write_text(path, json.dumps(payload, indent=2) + "\n")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
