"""`imagegen build` on a terminal: one line per image and layer, the BuildKit stream in the log file.
Run in tmux, a real terminal, and read back from its screen with capture-pane."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import time

import pytest

from imagegen.engine.progress import BuildkitProgress, TerminalView, clock, step_of
from tests.conftest import CPU_BUILD_ARGS
from tests.docker_env import unique_name
from tests.helpers import REPO

DONE = "IMAGEGEN-EXIT-"


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def test_a_build_on_a_terminal_shows_one_line_per_layer(cpu_image, tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (.ci/setup --tests installs it)", pytrace=False)
    report = tmp_path / "build.json"
    shutil.copy(cpu_image["work"] / "build.json", report)  # the previous run: its layer times are the guide
    command = " ".join([sys.executable, "-m", "imagegen", "build", *CPU_BUILD_ARGS, "--context-dir",
                        str(tmp_path / "contexts"), "--report", str(report)])
    session = unique_name("imagegen-view")
    tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50", "-c", str(REPO),
         f"{command}; echo {DONE}$?; sleep 600")
    try:
        deadline = time.monotonic() + 600
        while DONE not in (screen := tmux("capture-pane", "-p", "-t", session, "-S", "-100")):
            assert time.monotonic() < deadline, screen
            time.sleep(1)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    print(screen)
    lines = [line.rstrip() for line in screen.splitlines() if line.strip()]
    assert f"{DONE}0" in lines
    layer_lines = [line for line in lines if line.startswith("[cpu ")]
    assert [line.split("]")[0] for line in layer_lines] == ["[cpu base", "[cpu framework", "[cpu trainer"]
    for line in layer_lines:
        assert re.fullmatch(r"\[cpu \w+\] built in \d+:\d\d, (\d+)/\1 steps cached \(last build \d+:\d\d\)", line), line
    assert not any(re.match(r"#\d+ ", line) for line in lines)  # not the BuildKit stream
    log = (tmp_path / "logs" / "cpu.log").read_text()
    assert re.search(r"^#\d+ \[\d+/\d+\] RUN ", log, re.MULTILINE)  # which is all in the log


def test_the_live_line_says_step_elapsed_and_the_guide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    screen = io.StringIO()
    view = TerminalView(screen)
    view.start("cpu framework", "building", 125.0)
    view.step(step_of("#7 [2/5] RUN --mount=type=cache,target=/root/.cache/pip   pip install torch==2.14.1"))
    view.finish("built in 0:03, 0/5 steps cached")
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # rich's cursor moves and erasures
    assert "[cpu framework] 0:00 (last build 2:05) step 2/5 RUN --mount=type=cache,target=/root/.cache/pip pip " \
           "install torch==2.14.1" in drawn
    assert drawn.endswith("[cpu framework] built in 0:03, 0/5 steps cached (last build 2:05)\n")
    assert step_of("#12 [stage-1 3/4] COPY a b") == (3, 4, "COPY a b") and step_of("#12 DONE 0.1s") is None
    assert clock(3725) == "62:05"


def test_one_parser_counts_the_steps_and_tells_the_view(monkeypatch):
    """The parser the build counts cached steps with is the one whose steps the view shows."""
    lines = ["#1 [internal] load build definition from Dockerfile", "#4 [1/3] FROM local/debian:bookworm",
             "#5 [2/3] RUN apt-get update", "#5 CACHED", "#6 [3/3] COPY a b", "#6 ERROR: failed to compute"]
    parser = BuildkitProgress()
    shown = [step for step in map(parser.feed, lines) if step]
    assert [s.number for s in shown] == [1, 2, 3] and len(parser.steps) == 2 and parser.cached == {"5"}
    assert parser.failed_step == "[3/3] COPY a b"
