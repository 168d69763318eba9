"""Debian's docker-registry (distribution 2.8) served on a free loopback port, plain HTTP: the registry the tests push
to (tests/docker_env.py) and the bench's cold-start section pulls from (bench/cold_engine.py). No imagegen command
uses it, so it lives beside them, not in imagegen: tests/ and bench/ share one copy without either importing the
other, and without pytest. It imports nothing but the standard library."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

START_TIMEOUT_S = 20
STORAGE = "storage"  # under the work directory: the registry's blobs and repositories
CONFIG = "config.yml"
LOG = "registry.log"


class RegistryNotServing(RuntimeError):
    """docker-registry exited, or did not answer in time; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now: another process may take it before the caller)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def config(port: int, storage: Path, htpasswd: Path | None = None) -> str:
    """docker-registry's configuration: on 127.0.0.1:PORT, blobs under `storage`, deletes allowed; with `htpasswd`
    (bcrypt entries, as `htpasswd -B` writes them), every request must log in."""
    auth = f"auth:\n  htpasswd:\n    realm: imagegen-test\n    path: {htpasswd}\n" if htpasswd else ""
    return (
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: imagegen-test\n"
        + auth
    )


def wait_until_serving(host: str, process: subprocess.Popen, log_path: Path,
                       timeout_s: float = START_TIMEOUT_S) -> None:
    """Returns once http://HOST/v2/ answers (401 from a registry that asks for a login counts); RegistryNotServing
    when the process exits first or timeout_s pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RegistryNotServing(f"docker-registry exited ({process.returncode}): {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://{host}/v2/", timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an answer (401 from a registry with htpasswd auth): it is up
        except OSError:
            time.sleep(0.2)
    raise RegistryNotServing(f"docker-registry did not answer on {host} in {timeout_s:g} s: "
                             f"{log_path.read_text()[-2000:]}")


@contextmanager
def serve(work: Path, htpasswd: Path | None = None, binary: str = "docker-registry",
          timeout_s: float = START_TIMEOUT_S) -> Iterator[str]:
    """docker-registry on a free loopback port, its configuration, log and storage under `work` (CONFIG, LOG,
    STORAGE); yields "127.0.0.1:PORT" once it answers and stops it on leaving. The storage stays: the caller
    measures or removes it."""
    port = free_port()
    (work / CONFIG).write_text(config(port, work / STORAGE, htpasswd))
    log_path = work / LOG
    with open(log_path, "wb") as log:
        process = subprocess.Popen([binary, "serve", str(work / CONFIG)], stdout=log, stderr=subprocess.STDOUT)
    try:
        host = f"127.0.0.1:{port}"
        wait_until_serving(host, process, log_path, timeout_s)
        yield host
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
