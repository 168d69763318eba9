"""Fixtures shared by the real-engine tests: the engine, a local base, a loopback registry,
and the cpu image, built once per session through `imagegen build` as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytest_plugins = ["tests.docker_env"]  # the engine, base image, registry and CA fixtures

WHEELHOUSE = REPO / ".cache" / "wheelhouse"
ARM64_BASE_IMAGE = "local/debian:bookworm-arm64"
CPU_BUILD_ARGS = ["--image", "cpu", "--platform", "linux/amd64", "--base-image", "local/debian:bookworm",
                  "--wheelhouse", str(WHEELHOUSE)]
CPU_ARM64_BUILD_ARGS = ["--image", "cpu", "--platform", "linux/arm64", "--base-image",
                        f"linux/arm64={ARM64_BASE_IMAGE}", "--wheelhouse", str(WHEELHOUSE)]


def imagegen(*args, cwd: Path = REPO, timeout: int = 1800, env: dict | None = None,
             stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagegen", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})}, input=stdin)


def ensure_wheelhouse() -> Path:
    """The torch wheels the cpu image installs from; .ci/setup fills it, this repairs it."""
    if not list(WHEELHOUSE.glob("torch-2.14.1-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(WHEELHOUSE),
                        "torch==2.14.1", "torchvision==0.29.1"], check=True)
    return WHEELHOUSE


@pytest.fixture(scope="session")
def cpu_image(local_base_image, tmp_path_factory) -> dict:
    """The cpu image as `imagegen build` makes it: its ref, image id and build report entry."""
    ensure_wheelhouse()
    work = tmp_path_factory.mktemp("cpu-build")
    result = imagegen("build", *CPU_BUILD_ARGS, "--context-dir", str(work / "contexts"),
                      "--report", str(work / "build.json"))
    assert result.returncode == 0, result.stderr[-5000:]
    (entry,) = json.loads((work / "build.json").read_text())["images"]
    return {"ref": entry["ref"], "id": entry["image_id"], "report": entry, "work": work}


@pytest.fixture(scope="session")
def cpu_arm64_image(arm64_base_image, tmp_path_factory) -> dict:
    """The cpu image's linux/arm64 build on this x86_64 engine (QEMU user emulation), and its test."""
    ensure_wheelhouse()  # x86_64 wheels: pip takes its aarch64 ones from the index
    work = tmp_path_factory.mktemp("cpu-arm64-build")
    result = imagegen("build", *CPU_ARM64_BUILD_ARGS, "--test", "--skip-train", "--context-dir", str(work / "contexts"),
                      "--report", str(work / "build.json"), timeout=3600)
    assert result.returncode == 0, result.stderr[-5000:]
    (entry,) = json.loads((work / "build.json").read_text())["images"]
    (test,) = json.loads((work / "test.json").read_text())["images"]
    return {"ref": entry["ref"], "id": entry["image_id"], "report": entry, "test": test, "work": work,
            "output": result.stderr}
