"""What build, test and push found, as plain data written to JSON reports.

These reports are the pipeline's record: `imagegen report` turns them into a page, CI
uploads them, and a user reads them instead of logs. Field names are a contract.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, TypeAdapter, ValidationError

from imagegen_contract import atomic
from imagegen_contract.checkrunner import FAIL, PASS, SKIP

from imagegen.core import platforms
from imagegen.core.errors import UserError

# The statuses a report holds, the check runner's (the image's own checks report the same): a report read back
# (read_reports) with another fails as a malformed report.
CheckStatus = Literal[PASS, FAIL, SKIP]
LayerStatus = Literal["built", "reused", "failed", "not built"]  # reused: built earlier in this run
BuildStatus = Literal["built", "failed", "skipped"]
TestStatus = Literal["passed", "failed"]
PushStatus = Literal["pushed", "refused", "failed", "not pushed"]


@dataclass
class LayerResult:
    layer: str
    ref: str
    status: LayerStatus
    duration_s: float = 0.0
    cached_steps: int = 0
    total_steps: int = 0
    image_id: str | None = None


@dataclass
class BuildResult:
    image: str
    ref: str  # repository:version-tag
    status: BuildStatus
    duration_s: float = 0.0
    size_bytes: int | None = None
    image_id: str | None = None
    failed_layer: str | None = None
    failed_step: str | None = None
    log_tail: list[str] = field(default_factory=list)
    log_file: str | None = None
    layers: list[LayerResult] = field(default_factory=list)
    max_size: int | None = None  # the budget the image broke, in bytes
    largest_paths: list[dict] = field(default_factory=list)  # {"path", "bytes"}, largest first
    sbom_file: str | None = None  # CycloneDX JSON, reports/sbom/IMAGE.cdx.json
    sbom_components: dict[str, int] = field(default_factory=dict)  # {"python": n, "os": n}
    hint: str = ""  # what to do about a failure imagegen recognises
    platform: str = platforms.DEFAULT
    unhashed: list[str] = field(default_factory=list)  # artifacts it installed without a hash (--allow-unhashed)


@dataclass
class Check:
    name: str
    status: CheckStatus
    detail: str = ""


@dataclass
class TestResult:
    image: str
    ref: str
    status: TestStatus
    image_id: str | None = None  # push only publishes the image these checks ran on
    gpu_runtime: bool = False
    gpu_reason: str = ""
    duration_s: float = 0.0
    checks: list[Check] = field(default_factory=list)
    platform: str = platforms.DEFAULT
    # How it was tested: "gpu" (its GPU checks ran), "native", or "emulated" (QEMU: torch not imported)
    mode: str = "native"

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class PushResult:
    image: str
    registry: str
    repository: str
    status: PushStatus
    digest: str | None = None
    pushed_tags: list[str] = field(default_factory=list)
    already_published: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)  # {"tag": ..., "reason": ...}
    reason: str = ""
    sbom_digest: str | None = None  # the SBOM artifact that refers to the pushed image
    sbom_found_by: str = ""  # "the referrers API" or "the referrers tag sha256-..."
    sbom_error: str = ""  # why the SBOM was not attached, when the image was pushed all the same
    provenance_digest: str | None = None  # the SLSA provenance statement that refers to the pushed image
    provenance_error: str = ""  # why it was not attached, when the image was pushed all the same
    signatures: list[str] = field(default_factory=list)  # of the image and its provenance, with --sign-key
    signature_error: str = ""  # why they were not written, when the image was pushed all the same
    platform: str = platforms.DEFAULT  # platforms.INDEX: the multi-platform index of the image
    compression: str = "gzip"  # of the pushed layers: "gzip" (docker push), "zstd" (skopeo), "none" (uncompressed)

    @property
    def layers(self) -> str:
        """The pushed layers' kind, as the push line and the report page say it."""
        return "uncompressed" if self.compression == "none" else self.compression


KINDS = ("build", "test", "push")


class ReportError(UserError):
    """A report file exists but is not a report imagegen wrote."""

    exit_code = 2


def write_json(path: Path, kind: str, results: list) -> None:
    """Write {"kind": ..., "images": [...]} atomically."""
    payload = {"kind": kind, "images": [asdict(result) for result in results]}
    atomic.write_text(path, json.dumps(payload, indent=2) + "\n")


def _is_report(payload, kind: str) -> bool:
    """The shape every report of ours has: {"kind": KIND, "images": [...]}."""
    return isinstance(payload, dict) and payload.get("kind") == kind and isinstance(payload.get("images"), list)


def why_not_replaceable(path: Path, kind: str) -> str | None:
    """Why a `kind` report may not be written to path: a directory, or a file that is not a `kind` report (a
    mistyped --report would replace it whole); None when it is new or an earlier report of that kind."""
    if path.is_dir():
        return f"{path} is a directory; name a file, e.g. {path / (kind + '.json')}"
    if not path.exists():
        return None
    try:
        payload = json.loads(path.read_bytes())
    except (OSError, ValueError):
        payload = None
    if _is_report(payload, kind):
        return None
    held = f"a {payload['kind']} report" if isinstance(payload, dict) and payload.get("kind") in KINDS else \
        f"not a {kind} report of imagegen's"
    return f"{path} exists and is {held}: writing the {kind} report there would replace it; name another file"


def read_report(path: Path, kind: str) -> dict:
    """The results of one report by image (and platform: cpu-arm64, see platforms.key);
    ReportError when it is not a `kind` report."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"{path}: cannot read the {kind} report: {error}") from None
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: the {kind} report is not JSON: {error}") from None
    if not _is_report(payload, kind):
        raise ReportError(f"{path}: not a {kind} report; expected {{\"kind\": \"{kind}\", \"images\": [...]}}")
    results = {}
    for index, entry in enumerate(payload["images"]):
        try:
            result = ADAPTERS[kind].validate_python(entry)
        except ValidationError as error:
            raise ReportError(f"{path}: images[{index}] is not a {kind} result: {_first_problem(error)}") from None
        results[platforms.key(result.image, getattr(result, "platform", platforms.DEFAULT))] = result
    return results


# A report is read back into these dataclasses by pydantic: a wrong type or an unknown field is one line naming
# the field, not a traceback far from the file that holds it.
for _result in (LayerResult, BuildResult, Check, TestResult, PushResult):
    _result.__pydantic_config__ = ConfigDict(extra="forbid")
ADAPTERS = {"build": TypeAdapter(BuildResult), "test": TypeAdapter(TestResult), "push": TypeAdapter(PushResult)}
EXPECTED = {"float": "float", "int": "int", "string": "str", "bool": "bool", "list": "list", "dict": "dict",
            "dataclass": "an object"}


def _first_problem(error: ValidationError) -> str:
    found = error.errors()[0]
    where = ".".join(str(part) for part in found["loc"])
    kind = found["type"]
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"unknown field {where}"
    if kind == "missing":
        return f"missing field {where}"
    if kind == "literal_error":
        return f"{where}: expected {found['ctx']['expected']}, got {json.dumps(found.get('input'), default=str)[:60]}"
    expected = next((name for prefix, name in EXPECTED.items() if kind.startswith(prefix)), kind)
    return f"{where}: expected {expected}, got {json.dumps(found.get('input'), default=str)[:60]}"
