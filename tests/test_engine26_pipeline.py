"""The pipeline on the engine users run (issue 55): the cpu image built, checked, pushed with its signature, SBOM and
provenance, pulled and run on Docker 26 with the containerd image store (the default for new installs from Docker
29), the project's second engine (testbed/engine26.py), with a way out to the package index for its build. The same
steps run on Docker 20.10 in tests/test_pipeline.py and tests/test_verify.py; a difference between the engines
fails here.

What the containerd store does differently, and each test here holds: an image's id is its manifest's digest, not its
config's; the inspect's Size is the compressed content; `docker save` writes an OCI layout whose layers are the
compressed blobs BuildKit exported."""

from __future__ import annotations

import json
import subprocess

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from testbed import engine26
from tests.conftest import CPU_BUILD_ARGS, ensure_wheelhouse, imagegen, read_report
from tests.docker_env import serve_registry
from tests.test_signing import write_key, write_public

# Not `beside` (tests/conftest.py): run beside the main engine's cold arm64 and cpu builds, Docker 26's build filled
# the disk (1 GB left, "no space left on device" in its export).
pytestmark = [pytest.mark.docker, pytest.mark.slow]

@pytest.fixture(scope="module")
def docker26(cpu_image, local_base_image, tmp_path_factory):
    """Docker 26 with the containerd store, empty but for the base (saved from the main engine, loaded here), and a
    registry both engines reach under one name; the main engine's cpu image, which the size test compares."""
    work = tmp_path_factory.mktemp("docker26")
    (work / "registry").mkdir()
    with serve_registry(work / "registry") as host, \
            engine26.running(work / "engine", containerd_store=True, uplink=True, shared=(work,)) as engine, \
            engine26.registry_in(engine, work / "registry" / "storage", work, port=int(host.rsplit(":", 1)[1])):
        loaded = subprocess.run(f"docker save {local_base_image} | DOCKER_HOST={engine.host} docker load",
                                shell=True, capture_output=True, text=True, timeout=600)
        assert loaded.returncode == 0, loaded.stderr
        key = ec.generate_private_key(ec.SECP256R1())
        write_key(work / "cosign.key", key)
        write_public(work / "cosign.pub", key)
        yield {"engine": engine, "registry": host, "work": work}


def on26(docker26, *args, **kwargs) -> subprocess.CompletedProcess:
    return imagegen(*args, env={"DOCKER_HOST": docker26["engine"].host}, **kwargs)


def docker26_cli(docker26, *args: str) -> str:
    done = subprocess.run(["docker", *args], env=docker26["engine"].env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def built26(docker26):
    ensure_wheelhouse()
    work = docker26["work"]
    result = on26(docker26, "build", *CPU_BUILD_ARGS, "--context-dir", str(work / "contexts"),
                  "--report", str(work / "build.json"))
    assert result.returncode == 0, result.stderr[-5000:]
    (entry,) = read_report(work / "build.json")
    # the build cache (the 3 GB wheelhouse sent as context, the pip cache mounts) is not needed again: its disk goes
    # back now, as the suite's other engine holds its own images beside this one
    docker26_cli(docker26, "builder", "prune", "-af")
    return entry


@pytest.fixture(scope="module")
def tested26(docker26, built26):
    result = on26(docker26, "test", "--image", "cpu", "--platform", "linux/amd64",
                  "--report", str(docker26["work"] / "test.json"))
    return result


@pytest.fixture(scope="module")
def pushed26(docker26, tested26):
    work = docker26["work"]
    result = on26(docker26, "push", "--image", "cpu", "--platform", "linux/amd64", "--registry", docker26["registry"],
                  "--test-report", str(work / "test.json"), "--sign-key", str(work / "cosign.key"),
                  "--report", str(work / "push.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    (entry,) = read_report(work / "push.json")
    return entry


def test_the_build_reports_the_image_the_engine_holds_at_its_unpacked_size(docker26, built26, cpu_image):
    inspected = json.loads(docker26_cli(docker26, "image", "inspect", built26["ref"]))[0]
    assert built26["image_id"] == inspected["Id"]
    # the containerd store's inspect Size is the compressed content: the build's size is what the layers unpack to,
    # as on Docker 20.10 (the same inputs built there; the containerd store counts disk blocks, a few % more)
    assert inspected["Size"] < 0.7 * built26["size_bytes"]
    assert abs(built26["size_bytes"] - cpu_image["report"]["size_bytes"]) < 0.05 * cpu_image["report"]["size_bytes"]


def test_the_image_passes_its_checks_and_its_two_grpo_steps(tested26):
    assert tested26.returncode == 0, tested26.stderr[-5000:]
    assert "pass  selftest.train.tiny_grpo" in tested26.stderr, tested26.stderr[-3000:]


def test_push_signs_and_attaches_what_verify_checks_and_a_second_push_is_already_published(docker26, pushed26):
    ref = f"{docker26['registry']}/{pushed26['repository']}:{pushed26['pushed_tags'][0]}"
    verified = imagegen("verify", ref, "--key", str(docker26["work"] / "cosign.pub"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    again = on26(docker26, "push", "--image", "cpu", "--platform", "linux/amd64", "--registry", docker26["registry"],
                 "--test-report", str(docker26["work"] / "test.json"), "--report", str(docker26["work"] / "again.json"))
    assert again.returncode == 0 and "(already published)" in again.stderr, again.stderr[-2000:]


def test_an_uncompressed_push_sends_the_layers_the_config_lists(docker26, built26, tested26, tmp_path):
    (tmp_path / "registry").mkdir()
    with serve_registry(tmp_path / "registry") as host:
        result = on26(docker26, "push", "--image", "cpu", "--platform", "linux/amd64", "--registry", host,
                      "--test-report", str(docker26["work"] / "test.json"), "--compression", "none",
                      "--report", str(tmp_path / "push.json"))
        assert result.returncode == 0, result.stderr[-3000:]
        (entry,) = read_report(tmp_path / "push.json")
        manifest = json.loads(subprocess.run(
            ["curl", "-sf", "-H", "Accept: application/vnd.docker.distribution.manifest.v2+json",
             f"http://{host}/v2/{entry['repository']}/manifests/{entry['digest']}"],
            capture_output=True, text=True, check=True).stdout)
    inspected = json.loads(docker26_cli(docker26, "image", "inspect", built26["ref"]))[0]
    assert [layer["digest"] for layer in manifest["layers"]] == inspected["RootFS"]["Layers"]
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.docker.image.rootfs.diff.tar"}


def test_the_pushed_image_pulled_by_digest_onto_the_emptied_engine_runs_its_checks(docker26, built26, pushed26):
    docker26_cli(docker26, "image", "prune", "-af")
    assert not docker26_cli(docker26, "images", "-q"), "the engine still holds images"
    ref = f"{docker26['registry']}/{pushed26['repository']}@{pushed26['digest']}"
    pulled = docker26_cli(docker26, "pull", ref)
    assert "Already exists" not in pulled, pulled
    result = on26(docker26, "test", ref, "--skip-train", "--report", str(docker26["work"] / "pulled.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(docker26_cli(docker26, "image", "inspect", ref))[0]["Id"] == pushed26["digest"]
