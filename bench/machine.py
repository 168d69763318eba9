"""The machine and the versions a result was measured with."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from importlib import metadata

from .common import DOCKER, REPO


def cpu_model() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def memory_gib() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def git_revision() -> str:
    def git(*args):
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()

    # RESULTS.md is what a run rewrites, section by section: not a change to what is measured.
    changed = git("status", "--porcelain", "--", ".", ":!bench/RESULTS.md")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if changed else "")


def docker_version() -> str:
    result = subprocess.run([DOCKER, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    return result.stdout.strip() or "not reachable"


def section() -> str:
    versions = {name: metadata.version(name) for name in ("torch", "transformers", "trl", "accelerate", "peft")}
    return "\n".join([
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores ({cpu_model()}), "
        f"{memory_gib():.1f} GiB RAM, no GPU.",
        "",
        f"Versions: docker engine {docker_version()}, imagegen {git_revision()}, host venv "
        + ", ".join(f"{name} {version}" for name, version in versions.items()) + ".",
    ])
