"""The bench's second engine (testbed/engine26.py): Debian trixie's Docker 26 started from the project's own files
beside the main engine, in a network namespace of its own, pulling from a registry on loopback, and leaving the main
engine's network and data as they were: its bridge, its iptables rules, its images and containers, its data root."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from testbed import engine26
from tests.docker_env import docker_cli, serve_registry, unique_name

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def main_engine_state(docker_client) -> dict:
    """What a second engine must not touch: the main bridge's addresses and state, the host namespace's iptables
    rules (counters left out), and the main engine's data root, images and containers."""
    bridge = json.loads(subprocess.run(["ip", "-j", "addr", "show", "docker0"], capture_output=True, text=True,
                                       check=True).stdout)
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    info = docker_client.info()
    return {"docker0": [(link["operstate"], [a["local"] for a in link["addr_info"]]) for link in bridge],
            "iptables": [re.sub(r"\[\d+:\d+\]", "", line) for line in rules.splitlines() if not line.startswith("#")],
            "root": info["DockerRootDir"], "images": sorted(image.id for image in docker_client.images.list()),
            "containers": sorted(c.id for c in docker_client.containers.list(all=True))}


def docker_images(engine: engine26.Engine) -> list[str]:
    listed = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], env=engine.env(),
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def go_minor(version: str) -> tuple[int, int]:
    major, minor = re.match(r"go(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def test_docker_26_starts_pulls_from_loopback_and_leaves_the_main_engine_alone(docker_client, local_base_image,
                                                                               tmp_path):
    before = main_engine_state(docker_client)
    (tmp_path / "registry").mkdir()
    with serve_registry(tmp_path / "registry") as host:
        ref = f"{host}/{unique_name('imagegen-test/engine26')}:1"
        docker_cli("tag", local_base_image, ref)
        docker_cli("push", ref)
        docker_cli("rmi", ref)
        with engine26.running(tmp_path / "engine26") as engine:
            assert engine.version.startswith("26."), engine
            assert go_minor(engine.go_version) >= (1, 21), engine  # sha256 with the CPU's SHA instructions
            assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(
                engine.netns) == 1
            with engine26.registry_in(engine, tmp_path / "registry" / "storage", tmp_path) as inner:
                pulled = subprocess.run(["docker", "pull", f"{inner}/{ref.split('/', 1)[1]}"], env=engine.env(),
                                        capture_output=True, text=True, timeout=300)
                assert pulled.returncode == 0, pulled.stdout + pulled.stderr
            ran = subprocess.run(["docker", "run", "--rm", "--network", "none", f"{inner}/{ref.split('/', 1)[1]}",
                                  "cat", "/etc/debian_version"], env=engine.env(), capture_output=True, text=True,
                                 timeout=120)
            assert ran.returncode == 0 and ran.stdout.startswith("12."), ran.stdout + ran.stderr
            with engine26.running(tmp_path / "second") as second:  # two engines from one root at once
                assert second.netns != engine.netns and second.host != engine.host
                assert not docker_images(second) and docker_images(engine)
                assert docker_images(engine) == [f"{inner}/{ref.split('/', 1)[1]}"]
            assert main_engine_state(docker_client) == before
        assert engine.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not (engine26.RUN_DIRS / engine.netns).exists()
    assert main_engine_state(docker_client) == before
