"""Helpers for a child process that serves HTTP: a free loopback port, waiting for its health URL (on TCP, or on a
Unix socket), stopping it.
Standard library only: `vlmgrpo serve` and the in-image checks (vlmgrpo.image.checks) share them, and a check must not
import the serving command for them."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Callable, Optional


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to a server listening on a Unix socket (the host in its URLs is a placeholder)."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def answers_health(url: str, socket_path: Optional[str] = None) -> bool:
    """The URL answers 200 within 2 s; with socket_path, asked of the server on that Unix socket (its path only)."""
    try:
        if socket_path is None:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.status == 200
        connection = UnixHTTPConnection(socket_path, timeout=2)
        try:
            connection.request("GET", urllib.parse.urlsplit(url).path or "/")
            return connection.getresponse().status == 200
        finally:
            connection.close()
    except (OSError, http.client.HTTPException):
        return False


def wait_for_health(url: str, timeout_s: float, still_running: Callable[[], bool],
                    socket_path: Optional[str] = None) -> bool:
    """Poll a /health URL until it answers 200 (True), or the server is gone or the time is up (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and still_running():
        if answers_health(url, socket_path):
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
