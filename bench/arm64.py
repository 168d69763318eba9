"""Section 6: the cpu image for linux/arm64 on this x86_64 machine, under QEMU user emulation:
a cold build and the checks emulation can run, whole commands."""

from __future__ import annotations

import json
from pathlib import Path

from .cache import make_cold
from .common import IMAGEGEN, WHEELHOUSE, run, table

ARM64_BASE = "local/debian:bookworm-arm64"


def section(work: Path) -> str:
    make_cold()
    build_report, test_report = work / "build.json", work / "test.json"
    build_s = run([*IMAGEGEN, "build", "--image", "cpu", "--platform", "linux/arm64", "--base-image",
                   f"linux/arm64={ARM64_BASE}", "--wheelhouse", str(WHEELHOUSE), "--report", str(build_report),
                   "--context-dir", str(work / "contexts")], log=work / "build.log")
    test_s = run([*IMAGEGEN, "test", "--image", "cpu", "--platform", "linux/arm64", "--report", str(test_report)],
                 log=work / "test.log")
    (built,) = json.loads(build_report.read_text())["images"]
    (tested,) = json.loads(test_report.read_text())["images"]
    counts = {status: sum(check["status"] == status for check in tested["checks"]) for status in ("pass", "fail", "skip")}
    rows = [("build, cold", f"{build_s:.0f}", ", ".join(f"{layer['layer']} {layer['duration_s']:.0f}"
                                                       for layer in built["layers"]), f"{built['size_bytes'] / 1e9:.2f} GB"),
            ("test (emulated checks)", f"{test_s:.0f}", f"{counts['pass']} pass, {counts['fail']} fail, "
             f"{counts['skip']} skip (needing a native arm64 host)", "")]
    return "\n".join([
        "## 6. arm64 under emulation (cpu image)",
        "",
        "`imagegen build --image cpu --platform linux/arm64 --base-image linux/arm64=local/debian:bookworm-arm64 "
        "--wheelhouse .cache/wheelhouse` after `docker builder prune -af` (uv downloads torch's aarch64 wheels "
        "inside the emulated build: the wheelhouse holds x86_64 ones), then `imagegen test --image cpu --platform "
        "linux/arm64`, each a whole command under Debian's QEMU 7.2 user emulation on this x86_64 machine.",
        "",
        table(("command", "wall s", "detail (s per layer)", "size"), rows),
    ])
