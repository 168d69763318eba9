"""The imagegen command line: validate, matrix, render, build, test, push."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from . import listing
from . import render as render_module
from . import rules
from .errors import MatrixError, UserError
from .plan import ImageSpec
from .select import Selection, choose
from .workspace import Workspace


def selection_options(command):
    """--cuda, --torch, --python, --image and --all, combined with AND."""
    options = [
        click.option("--cuda", metavar="X.Y", help="Images on this CUDA; 12.4 matches 12.4.x."),
        click.option("--torch", "torch_version", metavar="X.Y", help="Images with this torch; 2.5 matches 2.5.x."),
        click.option("--python", metavar="X.Y", help="Images with this Python."),
        click.option("--image", "images", metavar="NAME", multiple=True, help="The image of this name (repeatable)."),
        click.option("--all", "all_images", is_flag=True, help="Every image of the matrix."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _selection(cuda, torch_version, python, images, all_images) -> Selection:
    return Selection(cuda=cuda, torch=torch_version, python=python, images=tuple(images), all=all_images)


def workspace_options(command):
    options = [
        click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=Workspace.matrix,
                     show_default=True, help="The compatibility matrix."),
        click.option("--templates", type=click.Path(path_type=Path), default=Workspace.templates,
                     help="Directory of the layer templates."),
        click.option("--trainer", "trainer_dir", type=click.Path(path_type=Path), default=Workspace.trainer,
                     help="The trainer distribution baked into the images."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


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
            click.echo(f"error: {error}", err=True)
            sys.exit(error.exit_code)

    return wrapper


def load_selected(matrix_path: Path, templates: Path, trainer_dir: Path, selection: Selection,
                  ) -> tuple[Workspace, list[ImageSpec]]:
    workspace = Workspace(matrix_path, templates, trainer_dir)
    _, specs = workspace.load()
    return workspace, choose(specs, selection)


@click.group()
@click.version_option(package_name="imagegen")
def main():
    """Build GPU training images you can trust from one compatibility matrix.

    matrix.yaml lists what exists (CUDA bases, torch builds, flash-attn wheels) and the
    images to publish. Every command validates it first. Select images with --cuda,
    --torch, --python, --image or --all; the filters combine with AND.

    \b
    Examples:
      imagegen validate
      imagegen matrix --format table
      imagegen render --cuda 12.4 --out build/contexts
      imagegen build --cuda 12.4 --push --registry ghcr.io/acme
    """


@main.command()
@workspace_options
@reports_user_errors
def validate(matrix_path, templates, trainer_dir):
    """Check matrix.yaml: keys and types, and that every image's versions fit together.

    Each problem names the file, line and key, the rule broken and what is allowed.
    Exits 2 when any problem is found.
    """
    workspace = Workspace(matrix_path, templates, trainer_dir)
    loaded, specs = workspace.load()
    for warning in rules.warnings(loaded):
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"{matrix_path}: {len(specs)} images valid")


@main.command()
@selection_options
@click.option("--format", "output_format", type=click.Choice(["table", "json", "github"]), default="table",
              show_default=True, help="github prints a strategy.matrix include list for fromJSON.")
@workspace_options
@reports_user_errors
def matrix(cuda, torch_version, python, images, all_images, output_format, matrix_path, templates, trainer_dir):
    """List the images of the matrix with every component version and tag."""
    selection = _selection(cuda, torch_version, python, images, all_images)
    _, specs = load_selected(matrix_path, templates, trainer_dir, selection)
    click.echo(listing.FORMATS[output_format](specs))


@main.command()
@selection_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Directory for the build contexts.")
@click.option("--base-image", help="Build FROM this image instead of the matrix's base (a mirror, a digest, "
              "a locally made image).")
@click.option("--apt-mirror", metavar="URL", help="Fetch OS packages from this mirror.")
@workspace_options
@reports_user_errors
def render(cuda, torch_version, python, images, all_images, out, base_image, apt_mirror, matrix_path, templates,
           trainer_dir):
    """Write one build context per image and layer: OUT/IMAGE/LAYER/Dockerfile and its files.

    Rendering the same inputs twice gives byte-identical output; a failed render leaves
    the previous output untouched.
    """
    selection = _selection(cuda, torch_version, python, images, all_images)
    workspace, specs = load_selected(matrix_path, templates, trainer_dir, selection)
    contexts = render_all(workspace, specs, render_module.RenderOptions(base_image, apt_mirror))
    render_module.write(out, contexts, specs)
    for spec in specs:
        click.echo(f"{out / spec.name}: {spec.ref()} FROM {base_image or spec.base_image}")


def render_all(workspace: Workspace, specs: list[ImageSpec], options: render_module.RenderOptions):
    env = render_module.environment(workspace.templates)
    trainer = render_module.trainer_files(workspace.trainer)
    return [context for spec in specs for context in render_module.render_image(spec, env, trainer, options)]


if __name__ == "__main__":  # pragma: no cover
    main()
