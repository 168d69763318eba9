"""A fresh node's engine and a registry for the cold-start section: a second dockerd with an empty data root (so
nothing the main engine holds, image or build cache, helps a pull), and Debian's docker-registry on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from testbed import registry as loopback

START_TIMEOUT_S = 60


def wait_until(ready, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited ({process.returncode}): {log.read_text()[-2000:]}")
        if ready():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not start in {START_TIMEOUT_S} s: {log.read_text()[-2000:]}")


@contextmanager
def loopback_registry(work: Path) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.8) on a free loopback port, as the tests serve it; yields host:port."""
    work.mkdir(parents=True, exist_ok=True)
    with loopback.serve(work, timeout_s=START_TIMEOUT_S) as host:  # RegistryNotServing is a RuntimeError
        yield host


def blobs(work: Path) -> Path:
    """Where the loopback registry of WORK stores its blobs (distribution's filesystem layout)."""
    return work / loopback.STORAGE / "docker" / "registry" / "v2" / "blobs"


def registry_bytes(work: Path) -> int:
    """Bytes of every blob the loopback registry stores (layers, configs, manifests), each once."""
    return sum(path.stat().st_size for path in blobs(work).rglob("data"))


def blob(work: Path, digest: str) -> Path:
    """Where the loopback registry of WORK stores the blob DIGEST."""
    algorithm, hex_digest = digest.split(":", 1)
    return blobs(work) / algorithm / hex_digest[:2] / hex_digest / "data"


@contextmanager
def fresh_engine(work: Path, debug: bool = False) -> Iterator[dict]:
    """A second dockerd (and its own containerd) with empty roots; yields the environment that points the docker
    CLI at it. Its containers run with --network none. It gets a bridge of its own and no iptables rules, so it
    cannot disturb the main engine's networks: with `--bridge none` dockerd deletes the host's docker0 at start
    (seen here: the main engine's next container failed with "could not find bridge docker0"). Everything it
    stored is removed on leaving. With debug, its log (work/cold-dockerd.log) says when it unpacks each layer."""
    root, run_dir = work / "cold-engine", Path("/run") / f"imagegen-cold-{os.getpid()}"
    socket_path = run_dir / "docker.sock"
    run_dir.mkdir(parents=True)
    bridge = f"igcold{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    log = work / "cold-dockerd.log"
    with open(log, "w") as stream:
        process = subprocess.Popen(
            ["dockerd", "--data-root", str(root), "--exec-root", str(run_dir / "exec"), "--pidfile",
             str(run_dir / "docker.pid"), "--host", f"unix://{socket_path}", "--bridge", bridge, "--iptables=false",
             "--ip-masq=false", *(["--debug"] if debug else [])], stdout=stream, stderr=subprocess.STDOUT)
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket_path}"}

    def answers() -> bool:
        return subprocess.run(["docker", "version"], env=env, capture_output=True).returncode == 0
    try:
        wait_until(answers, "the second dockerd", process, log)
        yield env
    finally:
        subprocess.run(["docker", "system", "prune", "-af"], env=env, capture_output=True)
        process.terminate()
        process.wait(timeout=60)
        subprocess.run(["umount", "-R", str(root)], capture_output=True)  # overlay mounts left by a hard stop
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
