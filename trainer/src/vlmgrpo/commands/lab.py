"""`vlmgrpo lab`: JupyterLab (image/lab.py) in the foreground, replacing this process so that signals reach it."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Optional

import click

from vlmgrpo.commands.options import fail
from vlmgrpo.errors import UserError
from vlmgrpo.image.lab import DEFAULT_PORT, announcement, copy_example, plan_lab


@click.command("lab")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Port to listen on.")
@click.option("--host", help="Address to listen on (default: VLMGRPO_SERVE_HOST, which the images set to 0.0.0.0, "
              "else 127.0.0.1).")
@click.option("--root-dir", help="Folder the lab serves (default: /workspace when it exists, else HOME).")
@click.option("--example/--no-example", default=True, show_default=True,
              help="Copy the example notebook into the folder unless a file of its name is there.")
def lab_command(port: int, host: Optional[str], root_dir: Optional[str], example: bool) -> None:
    """JupyterLab on this image's stack, with a token always required: JUPYTER_TOKEN's, else a new one printed once.
    TensorBoard is at /tensorboard/ on the same port."""
    try:
        plan = plan_lab(port, host, root_dir)
    except UserError as error:
        fail(error)
    if importlib.util.find_spec("jupyterlab") is None:
        fail(UserError("JupyterLab is not installed here: the images that name a jupyterlab version have it (the "
                       "devel images and cpu), or `pip install 'vlmgrpo[lab]'`"))
    copied = copy_example(plan.root) if example else None
    say = lambda text: click.echo(f"vlmgrpo: {text}", err=True)  # noqa: E731
    if plan.root_note:
        say(plan.root_note)
    if copied:
        say(f"example notebook: {copied}")
    say(announcement(plan, port))
    sys.stderr.flush()
    os.chdir(plan.root)
    os.execve(plan.argv[0], plan.argv, plan.environment)
