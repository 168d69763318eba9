"""How a build shows its layers: BuildKit's whole stream for CI logs, or one live line per
image and layer on a terminal (the step running, the time so far, the last build's time)."""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from typing import Callable, TextIO

# BuildKit plain progress opens a Dockerfile step as "#7 [2/5] RUN ..." (or "[stage 2/5]").
_STEP = re.compile(r"^#\d+ \[(?:[^\]]+ )?(\d+)/(\d+)\] (.*)$")
REDRAW_S = 1.0


def step_of(line: str) -> tuple[int, int, str] | None:
    """(n, m, instruction) when the BuildKit line opens step n of m."""
    match = _STEP.match(line)
    return (int(match.group(1)), int(match.group(2)), " ".join(match.group(3).split())) if match else None


def clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class PlainView:
    """Every BuildKit line, prefixed with the image and layer: what CI logs keep."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo = echo
        self.title = ""

    def start(self, title: str, what: str, guide_s: float | None) -> None:
        self.title = title
        self.echo(f"[{title}] {what}")

    def line(self, text: str) -> None:
        self.echo(f"[{self.title}] {text}")

    def finish(self, summary: str) -> None:
        self.echo(f"[{self.title}] {summary}")


class TerminalView:
    """One line per layer, redrawn in place while it builds and left behind when it is done."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.stream = stream
        self.lock = threading.Lock()
        self.title, self.step, self.guide_s, self.started = "", "", None, 0.0
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None

    def start(self, title: str, what: str, guide_s: float | None) -> None:
        self.title, self.step, self.guide_s, self.started = title, "starting", guide_s, time.monotonic()
        self.stop.clear()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()
        self._draw()

    def line(self, text: str) -> None:
        step = step_of(text)
        if step:
            self.step = f"step {step[0]}/{step[1]} {step[2]}"
            self._draw()

    def finish(self, summary: str) -> None:
        self.stop.set()
        if self.ticker:
            self.ticker.join()
        guide = f" (last build {clock(self.guide_s)})" if self.guide_s else ""
        with self.lock:
            self.stream.write(f"\r\x1b[K[{self.title}] {summary}{guide}\n")
            self.stream.flush()

    def _tick(self) -> None:
        while not self.stop.wait(REDRAW_S):
            self._draw()

    def _draw(self) -> None:
        guide = f" (last build {clock(self.guide_s)})" if self.guide_s else ""
        text = f"[{self.title}] {clock(time.monotonic() - self.started)}{guide} {self.step}"
        width = shutil.get_terminal_size().columns
        with self.lock:
            # Cut to the width: a wrapped line cannot be redrawn in place with a carriage return.
            self.stream.write("\r\x1b[K" + text[: max(width - 1, 20)])
            self.stream.flush()


def view_for(progress: str, echo: Callable[[str], None], stream: TextIO = sys.stderr):
    """--progress auto: one line per layer on a terminal, the whole stream elsewhere."""
    if progress == "tty" or (progress == "auto" and stream.isatty()):
        return TerminalView(stream)
    return PlainView(echo)
