"""Helpers for a child process that serves HTTP: a free loopback port, waiting for its health URL, stopping it.
Standard library only: `vlmgrpo serve` and the in-image checks (vlmgrpo.checks) share them, and a check must not
import the serving command for them."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from typing import Callable


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers_health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_for_health(url: str, timeout_s: float, still_running: Callable[[], bool]) -> bool:
    """Poll a /health URL until it answers 200 (True), or the server is gone or the time is up (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and still_running():
        if answers_health(url):
            return True
        time.sleep(0.5)
    return False


def stop_process(process: subprocess.Popen, timeout_s: float = 30) -> bool:
    """SIGTERM, then SIGKILL after timeout_s: a server that shuts down cleanly when asked, or one that does not.
    True when it had to be killed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return True
    return False
