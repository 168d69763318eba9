"""`vlmgrpo lab`: JupyterLab on the stack that trains, as the image's user, a token always required.

The images that name a jupyterlab version (matrix.yaml) install the trainer's `lab` extra: JupyterLab, ipywidgets,
jupyter-server-proxy (TensorBoard at /tensorboard/, registered below) and matplotlib. Everything here is plain data
for the command in commands/lab.py; the server is JupyterLab's own.
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass
from importlib import resources
from typing import Mapping, Optional

from imagegen_contract.atomic import write_text
from vlmgrpo.errors import UserError

TOKEN_VARIABLE = "JUPYTER_TOKEN"  # Jupyter Server reads it itself; an empty one would switch authentication off
HOST_VARIABLE = "VLMGRPO_SERVE_HOST"  # as `vlmgrpo serve`: loopback unless told; the images set 0.0.0.0
DEFAULT_PORT = 8888
WORKSPACE = "/workspace"  # where `docker run -v $PWD:/workspace` mounts the user's notebooks
EXAMPLE = "vlmgrpo-walkthrough.ipynb"  # the example notebook, as it is named in the lab's folder
TENSORBOARD_LOGDIR_VARIABLE = "VLMGRPO_TENSORBOARD_LOGDIR"


@dataclass(frozen=True)
class LabPlan:
    argv: list[str]
    environment: dict[str, str]
    root: str
    url: str  # where a browser on the same host opens it, with the token only when it was generated here
    token_generated: bool
    root_note: Optional[str]  # said when the folder is not the mounted workspace


def token_from(environ: Mapping[str, str]) -> tuple[str, bool]:
    """The token (JUPYTER_TOKEN's, else a new random one) and whether it was generated here."""
    if TOKEN_VARIABLE not in environ:
        return secrets.token_urlsafe(24), True
    token = environ[TOKEN_VARIABLE].strip()
    if not token:
        raise UserError(f"{TOKEN_VARIABLE} is set but empty, which would let anyone who reaches the port run code "
                        f"as this user; set it to a secret (e.g. -e {TOKEN_VARIABLE}=$(openssl rand -hex 24)), or "
                        "unset it and one is generated and printed")
    return token, False


def choose_root(requested: Optional[str], environ: Mapping[str, str]) -> tuple[str, Optional[str]]:
    """The folder the lab serves: --root-dir, else /workspace when mounted or present, else HOME (with a note that
    nothing there outlives the container)."""
    if requested:
        if not os.path.isdir(requested):
            raise UserError(f"--root-dir {requested}: no such directory; create it or mount one there")
        return os.path.abspath(requested), None
    if os.path.isdir(WORKSPACE):
        return WORKSPACE, None
    home = environ.get("HOME") or os.getcwd()
    return home, (f"serving {home}: mount a folder at {WORKSPACE} (docker run -v \"$PWD:{WORKSPACE}\" ...) to keep "
                  "notebooks after the container ends")


def plan_lab(port: int, host: Optional[str], requested_root: Optional[str],
             environ: Mapping[str, str] = os.environ) -> LabPlan:
    token, generated = token_from(environ)
    root, note = choose_root(requested_root, environ)
    host = host or environ.get(HOST_VARIABLE) or "127.0.0.1"
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={host}",
            f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:  # `docker run --user 0`: the token still guards it; Jupyter alone would refuse to start
        argv.append("--allow-root")
    environment = {**environ, TOKEN_VARIABLE: token}
    environment.setdefault(TENSORBOARD_LOGDIR_VARIABLE, root)
    # A generated token is printed once, or nobody could log in; a chosen one is the user's secret, and logs (docker
    # logs, a CI job's output) are no place for it: its owner knows it.
    url = f"http://127.0.0.1:{port}/lab" + (f"?token={token}" if generated else "")
    return LabPlan(argv, environment, root, url, generated, note)


def announcement(plan: LabPlan, port: int) -> str:
    """The line `lab` prints: where it is and whose token it takes (a chosen token is never printed)."""
    origin = "generated; set JUPYTER_TOKEN to choose it" if plan.token_generated else (
        f"taken from {TOKEN_VARIABLE}, not shown")
    return f"JupyterLab at {plan.url} (token {origin}; publish the port with -p {port}:{port})"


def copy_example(root: str) -> Optional[str]:
    """Put the example notebook in the lab's folder unless a file of its name is there; its path when copied."""
    target = os.path.join(root, EXAMPLE)
    if os.path.exists(target) or not os.access(root, os.W_OK):
        return None
    write_text(target, (resources.files("vlmgrpo") / "notebooks" / "walkthrough.ipynb").read_text(encoding="utf-8"))
    return target


def tensorboard_proxy() -> dict:
    """jupyter-server-proxy's entry for TensorBoard (entry point jupyter_serverproxy_servers): it starts on first visit
    of /tensorboard/ on the lab's own port and token, reading the runs under the lab's folder (report_to tensorboard
    writes OUTPUT/runs)."""
    logdir = os.environ.get(TENSORBOARD_LOGDIR_VARIABLE) or os.getcwd()
    return {"command": [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--port", "{port}",
                        "--path_prefix", "{base_url}tensorboard"],
            "timeout": 120, "absolute_url": True, "launcher_entry": {"title": "TensorBoard"}}
