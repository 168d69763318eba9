"""`vlmgrpo lab`: JupyterLab (image/lab.py) in the foreground, replacing this process so that signals reach it."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import click

from imagegen_contract.options import field_options
from vlmgrpo.commands.fields import take, with_options
from vlmgrpo.commands.options import OnceCommand, fail
from vlmgrpo.errors import UserError
from vlmgrpo.image.lab import DEFAULT_PORT, announcement, copy_example, plan_lab


@dataclass
class LabSettings:
    """Where the lab listens, what it serves, and whether the example notebook is copied in."""
    port: int = field(default=DEFAULT_PORT, metadata={"help": "Port to listen on."})
    host: Optional[str] = field(default=None, metadata={
        "help": "Address to listen on (default: VLMGRPO_SERVE_HOST, which the images set to 0.0.0.0, else 127.0.0.1)."})
    root_dir: Optional[str] = field(default=None, metadata={
        "help": "Folder the lab serves (default: /workspace when it exists, else HOME)."})
    example: bool = field(default=True, metadata={
        "flag": "--example/--no-example",
        "help": "Copy the example notebook into the folder unless a file of its name is there."})


@click.command("lab", cls=OnceCommand)
@with_options(field_options(LabSettings))
def lab_command(**given) -> None:
    """JupyterLab on this image's stack, with a token always required: JUPYTER_TOKEN's, else a new one printed once.
    TensorBoard is at /tensorboard/ on the same port."""
    settings = LabSettings(**take(LabSettings, given))
    port = settings.port
    try:
        plan = plan_lab(port, settings.host, settings.root_dir)
    except UserError as error:
        fail(error)
    if importlib.util.find_spec("jupyterlab") is None:
        fail(UserError("JupyterLab is not installed here: the images that name a jupyterlab version have it (the "
                       "devel images and cpu), or `pip install 'vlmgrpo[lab]'`"))
    copied = copy_example(plan.root) if settings.example else None
    say = lambda text: click.echo(f"vlmgrpo: {text}", err=True)  # noqa: E731
    if plan.root_note:
        say(plan.root_note)
    if copied:
        say(f"example notebook: {copied}")
    say(announcement(plan, port))
    sys.stderr.flush()
    os.chdir(plan.root)
    os.execve(plan.argv[0], plan.argv, plan.environment)
