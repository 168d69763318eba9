"""The command line's shared options and how a command reports a user's mistake."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagegen.core.errors import MatrixError, UserError
from imagegen.cli.fields import settings_options
from imagegen.cli.settings import WorkspaceFlags
from imagegen.matrix.select import Selection, choose
from imagegen.render.contexts import RenderOptions
from imagegen.render.locked import LockedImage
from imagegen.workspace import Workspace, repository_root

if TYPE_CHECKING:  # the registry's client imports docker-py and oras: only the commands that push load them
    from imagegen.engine.registry.http import Credentials


# --cuda, --torch, --python, --with, --image, --all and --platform, combined with AND, handed over as `selection`.
selection_options = settings_options(Selection, "cuda", "torch", "python", "components", "images", "all", "platform",
                                     into="selection")


def workspace_options(command):
    """--matrix, --locks, --templates and --trainer, handed over as `workspace`."""

    @settings_options(WorkspaceFlags, into="where")
    @functools.wraps(command)
    def wrapper(*args, where: WorkspaceFlags, **kwargs):
        root = repository_root()
        if not where.matrix_path and root != Path.cwd().resolve():  # found upwards or named: say which one
            click.echo(f"imagegen: the repository at {root}", err=True)
        workspace = Workspace.of(where.matrix_path, where.templates, where.trainer_dir, where.locks_dir, root)
        return command(*args, workspace=workspace, **kwargs)

    return wrapper


def reports_user_errors(command):
    """A user's mistake prints as plain lines on stderr and a non-zero exit, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MatrixError as error:
            for problem in error.problems:
                click.echo(f"error: {problem}", err=True)
            sys.exit(error.exit_code)
        except UserError as error:
            for line in str(error).splitlines():
                click.echo(f"error: {line}", err=True)
            sys.exit(error.exit_code)

    return wrapper


def load_selected(workspace: Workspace, selection: Selection,
                  options: RenderOptions = RenderOptions()) -> list[LockedImage]:
    """The selected platforms of images, each locked (rendered with `options`); else one line per image that
    is not."""
    plan = workspace.load(options)
    return plan.require_locked(choose(plan.images, selection, plan.matrix.components))


def given(parameter: str) -> bool:
    """Whether the user passed this option (by its parameter name) on the command line, rather than its default
    standing: `--compression gzip` without --push is as much a mistake as `--compression zstd`."""
    return click.get_current_context().get_parameter_source(parameter) not in (
        None, click.ParameterSource.DEFAULT, click.ParameterSource.DEFAULT_MAP)


def registry_credentials(user: str | None, password_stdin: bool) -> Credentials | None:
    """Credentials from the command line; None leaves them to the docker config."""
    from imagegen.engine.registry.http import Credentials

    if password_stdin != bool(user):
        raise UserError("--registry-user USER and --registry-password-stdin go together, e.g. "
                        "echo \"$TOKEN\" | imagegen push ... --registry-user USER --registry-password-stdin")
    if not user:
        return None
    password = click.get_text_stream("stdin").read().rstrip("\r\n")
    if not password:
        raise UserError("--registry-password-stdin: stdin is empty; pipe the password or token in")
    return Credentials(user, password)
