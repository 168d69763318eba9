"""BuildKit's plain progress, read once: the parser that counts a build's steps, cache hits and failure, and
tells the view which step a build is in; and the two views of a build, the whole stream for CI logs or one
live line per image and layer on a terminal (drawn by rich: the step running, the time so far, the last
build's time)."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

# "#5 [2/3] RUN ..." opens a vertex (a Dockerfile step carries "[N/M]" or "[stage N/M]"); "#5 CACHED" and
# "#5 ERROR: ..." report on it by number.
_VERTEX_LINE = re.compile(r"^#(\d+) (.*)$")
_STEP_HEADER = re.compile(r"^\[(?:[^\]]+ )?(\d+)/(\d+)\] (.*)$")
REDRAW_PER_S = 1.0


class Step(NamedTuple):
    number: int
    total: int
    instruction: str


def step_of(line: str) -> Step | None:
    """The step a BuildKit line opens, if it opens one."""
    match = _VERTEX_LINE.match(line)
    header = _STEP_HEADER.match(match.group(2)) if match else None
    if not header:
        return None
    return Step(int(header.group(1)), int(header.group(2)), " ".join(header.group(3).split()))


@dataclass
class BuildkitProgress:
    """Follows one build's plain progress: its Dockerfile steps, the cached ones, the one that failed."""

    headers: dict[str, str] = field(default_factory=dict)
    steps: set[str] = field(default_factory=set)
    cached: set[str] = field(default_factory=set)
    failed_vertex: str | None = None

    def feed(self, line: str) -> Step | None:
        """Take one line; the step it opens, if it opens one."""
        match = _VERTEX_LINE.match(line)
        if not match:
            return None
        vertex, text = match.groups()
        if vertex in self.headers:
            if text == "CACHED":
                self.cached.add(vertex)
            elif text.startswith("ERROR") and self.failed_vertex is None:
                self.failed_vertex = vertex
            return None
        self.headers[vertex] = text
        step = step_of(line)
        # FROM resolves a base image rather than running a step, and BuildKit marks a local base CACHED on some
        # builds and DONE on others: counting it would make "all cached" depend on that rather than on the steps.
        if step and step.instruction.split(" ", 1)[0].upper() != "FROM":
            self.steps.add(vertex)
        return step

    @property
    def failed_step(self) -> str | None:
        return self.headers.get(self.failed_vertex) if self.failed_vertex else None


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

    def step(self, step: Step) -> None:
        """The lines say it already."""

    def finish(self, summary: str) -> None:
        self.echo(f"[{self.title}] {summary}")


class TerminalView:
    """One line per layer, redrawn in place while it builds and left behind when it is done; the stream goes
    to the log file only."""

    def __init__(self, stream: TextIO = sys.stderr):
        self.console = Console(file=stream, force_terminal=True, highlight=False, markup=False)
        self.title, self.now, self.guide_s, self.started = "", "", None, 0.0
        self.live: Live | None = None

    def start(self, title: str, what: str, guide_s: float | None) -> None:
        self.title, self.now, self.guide_s = title, "starting", guide_s
        self.started = time.monotonic()
        self.live = Live(get_renderable=self._line, console=self.console, transient=True,
                         refresh_per_second=REDRAW_PER_S)
        self.live.start()

    def line(self, text: str) -> None:
        """The view shows steps, not lines."""

    def step(self, step: Step) -> None:
        self.now = f"step {step.number}/{step.total} {step.instruction}"
        if self.live:
            self.live.refresh()

    def finish(self, summary: str) -> None:
        if self.live:
            self.live.stop()
        self.console.print(Text(f"[{self.title}] {summary}{self._guide()}"), soft_wrap=True)

    def _guide(self) -> str:
        return f" (last build {clock(self.guide_s)})" if self.guide_s else ""

    def _line(self) -> Text:
        # Cut to the width: a wrapped line cannot be redrawn in place.
        text = f"[{self.title}] {clock(time.monotonic() - self.started)}{self._guide()} {self.now}"
        return Text(text, no_wrap=True, overflow="ellipsis")


def view_for(progress: str, echo: Callable[[str], None], stream: TextIO = sys.stderr):
    """--progress auto: one line per layer on a terminal, the whole stream elsewhere."""
    if progress == "tty" or (progress == "auto" and stream.isatty()):
        return TerminalView(stream)
    return PlainView(echo)
