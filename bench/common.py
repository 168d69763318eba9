"""What every benchmark section shares: paths, the docker client, timing, Markdown tables."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
BASE_IMAGE = "local/debian:bookworm"
DOCKER = "/usr/bin/docker"  # the BuildKit-capable client (see imagegen.docker_cli)
IMAGEGEN = [sys.executable, "-m", "imagegen"]
# The console script users type, as examples/README.md does: its start-up is part of what they pay.
VLMGRPO = [str(Path(sys.executable).with_name("vlmgrpo"))]


def run(argv: list[str], log: Path | None = None, cwd: Path = REPO, **kwargs) -> float:
    """Run argv to completion (output to log, if given); its wall time in seconds. Fails loudly."""
    started = time.monotonic()
    if log is None:
        result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, **kwargs)
        if result.returncode != 0:  # what the command said, not only its exit status: a failed pull says why
            tail = (result.stderr or result.stdout or "").strip().splitlines()[-10:]
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n" + "\n".join(tail))
    else:
        with open(log, "w") as stream:
            result = subprocess.run(argv, cwd=cwd, stdout=stream, stderr=subprocess.STDOUT, **kwargs)
        if result.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}); log {log}:\n" + "\n".join(tail))
    return time.monotonic() - started


def docker(*args: str) -> str:
    return subprocess.run([DOCKER, *args], check=True, capture_output=True, text=True).stdout


def table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def gb(size_bytes: float) -> str:
    return f"{size_bytes / 1e9:.2f} GB"


def goal(met: bool) -> str:
    return "met" if met else "**missed**"


def section_main(section, images: tuple[str, ...]) -> None:
    """`python -m bench.MODULE DIR [IMAGE ...]`: one section of images alone, its text printed."""
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    print(section(target, tuple(sys.argv[2:]) or images))
