"""Fixtures shared by the real-engine tests: the engine, a local base, a loopback registry,
and the cpu image, built once per session through `imagegen build` as a user runs it.

A test that uses the engine or a registry (any fixture in ENGINE_FIXTURES, directly or through another
fixture) is marked `docker` here, so `pytest -m "not docker"` leaves it out without each test saying so. .ci/test runs
`docker and not beside` in one session and the rest beside it (see beside_order).
`--image-ref REF` checks an image already built (pulled, or built by CI) instead of building the cpu image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tests.helpers import REPO
from tests.test_signing import write_key, write_public

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


ENGINE_FIXTURES = {"docker_client", "build_client", "local_base_image", "arm64_base_image", "registry",
                   "auth_registry", "throwaway_tag", "cpu_image", "cpu_arm64_image", "image_under_test"}


def pytest_addoption(parser):
    parser.addoption("--image-ref", metavar="REF", default=None,
                     help="Check this image, already built or pulled, in the image tests (tests/test_image_trains.py) "
                          "instead of building the cpu image of the matrix. Not --image, which names a matrix entry.")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
    # The tests marked `beside` run last in .ci/test's second session: they run the cpu image, which the main engine's
    # session has built by then, while that session's pushes and gzip leave a core. Stable: the rest keep their order.
    items.sort(key=lambda item: item.get_closest_marker("beside") is not None)


@pytest.fixture(scope="session")
def image_under_test(request, docker_client, tmp_path_factory) -> dict:
    """The image the image tests run: --image-ref's, else the cpu image built for this session."""
    ref = request.config.getoption("--image-ref")
    if ref is None:
        return request.getfixturevalue("cpu_image")
    from imagegen.engine.containers import ContainerError, image_facts

    try:
        facts = image_facts(ref, client=docker_client)
    except ContainerError as error:
        pytest.fail(f"--image-ref {ref}: {error}", pytrace=False)
    return {"ref": ref, "id": facts["id"], "report": None, "work": tmp_path_factory.mktemp("image-ref")}


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


def read_report(path):
    """The entries of a report imagegen wrote (build, test, push)."""
    return json.loads(path.read_text())["images"]


@pytest.fixture(scope="session")
def cpu_published(cpu_image, cpu_arm64_image, auth_registry, tmp_path_factory) -> dict:
    """The cpu image for both platforms pushed to the private registry by `imagegen push`, after a push without
    credentials: the push's arguments, its folder and the two results; signed with a key made for it (its folder's
    cosign.key and cosign.pub). tests/test_pipeline.py and tests/test_verify.py read it.

    The layers go up uncompressed (`--compression none`): that streams both 6 GB images through imagegen's own
    registry code, where the default gzip push is the engine's `docker push`, which gzipped each platform for minutes
    on the suite's critical path."""
    work = tmp_path_factory.mktemp("cpu-published")
    tested = imagegen("test", "--image", "cpu", "--platform", "linux/amd64", "--skip-train",
                      "--report", str(work / "amd64.json"))
    assert tested.returncode == 0, tested.stderr[-2000:]
    both = read_report(work / "amd64.json") + [cpu_arm64_image["test"]]
    (work / "test.json").write_text(json.dumps({"kind": "test", "images": both}))
    key = ec.generate_private_key(ec.SECP256R1())
    write_key(work / "cosign.key", key)
    write_public(work / "cosign.pub", key)
    push = ["push", "--image", "cpu", "--registry", auth_registry.host, "--test-report", str(work / "test.json"),
            "--compression", "none", "--sign-key", str(work / "cosign.key")]
    anonymous = imagegen(*push, "--report", str(work / "anonymous.json"), env={"DOCKER_CONFIG": str(work)})
    started = time.monotonic()
    result = imagegen(*push, "--registry-user", auth_registry.username, "--registry-password-stdin",
                      "--report", str(work / "push.json"), stdin=auth_registry.password + "\n")
    print(f"push of the cpu image for two platforms with their SBOMs: {time.monotonic() - started:.1f} s")
    return {"push": push, "work": work, "anonymous": anonymous, "result": result}
