"""The command line's shared options and how a command reports a user's mistake."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from imagegen.core.errors import MatrixError, UserError
from imagegen.engine.registry import COMPRESSIONS, registry_problem
from imagegen.matrix.schema import PLATFORMS
from imagegen.matrix.select import Selection, choose
from imagegen.render.contexts import RenderOptions
from imagegen.render.locked import LockedImage
from imagegen.workspace import MATRIX_FILE, REPOSITORY_VARIABLE, Workspace, repository_root

if TYPE_CHECKING:  # the registry's client imports docker-py and oras: only the commands that push load them
    from imagegen.engine.registry.http import Credentials


def selection_options(command):
    """--cuda, --torch, --python, --with, --image and --all, combined with AND, handed over as `selection`."""
    options = [
        click.option("--cuda", metavar="X.Y", help="Images on this CUDA; 12.4 matches 12.4.x."),
        click.option("--torch", "torch_version", metavar="X.Y", help="Images with this torch; 2.5 matches 2.5.x."),
        click.option("--python", metavar="X.Y", help="Images with this Python."),
        click.option("--with", "components", metavar="COMPONENT", multiple=True, help="Images that have this "
                     "component (a key of matrix.yaml's components, e.g. vllm; repeatable)."),
        click.option("--image", "images", metavar="NAME", multiple=True, help="The image of this name (repeatable)."),
        click.option("--all", "all_images", is_flag=True, help="Every image of the matrix."),
        click.option("--platform", type=click.Choice(PLATFORMS), help="Only this platform of images built for "
                     "several (default: each of an image's platforms)."),
    ]

    @functools.wraps(command)
    def wrapper(*args, cuda, torch_version, python, components, images, all_images, platform, **kwargs):
        selection = Selection(cuda=cuda, torch=torch_version, python=python, images=tuple(images), all=all_images,
                              components=tuple(components), platform=platform)
        return command(*args, selection=selection, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def workspace_options(command):
    """--matrix, --locks, --templates and --trainer, handed over as `workspace`."""
    options = [
        click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), help="The compatibility matrix "
                     f"(default: {MATRIX_FILE} of the repository: the nearest folder from here upwards that has one, "
                     f"or ${REPOSITORY_VARIABLE})."),
        click.option("--locks", "locks_dir", type=click.Path(path_type=Path), help="Directory of the image "
                     "locks (default: locks/ beside the matrix)."),
        click.option("--templates", type=click.Path(path_type=Path),
                     help="Directory of the layer templates (default: the repository's templates/)."),
        click.option("--trainer", "trainer_dir", type=click.Path(path_type=Path),
                     help="The trainer distribution baked into the images (default: the repository's trainer/)."),
    ]

    @functools.wraps(command)
    def wrapper(*args, matrix_path, locks_dir, templates, trainer_dir, **kwargs):
        root = repository_root()
        if not matrix_path and root != Path.cwd().resolve():  # found upwards or named: say which one
            click.echo(f"imagegen: the repository at {root}", err=True)
        return command(*args, workspace=Workspace.of(matrix_path, templates, trainer_dir, locks_dir, root), **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
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


def base_images_option(context, parameter, values) -> tuple[tuple[str, str], ...]:
    """--base-image REF (every platform) or PLATFORM=REF, as (platform or "", ref) pairs."""
    chosen = []
    for value in values:
        platform, equals, ref = value.partition("=")
        if equals and platform.startswith("linux/"):
            if platform not in PLATFORMS:
                raise click.BadParameter(f"{platform} is not one of {', '.join(PLATFORMS)}")
            chosen.append((platform, ref))
        else:
            chosen.append(("", value))
    return tuple(chosen)


def load_selected(workspace: Workspace, selection: Selection,
                  options: RenderOptions = RenderOptions()) -> list[LockedImage]:
    """The selected platforms of images, each locked (rendered with `options`); else one line per image that
    is not."""
    plan = workspace.load(options)
    return plan.require_locked(choose(plan.images, selection, plan.matrix.components))


def build_options(command):
    options = [
        click.option("--base-image", "base_images", metavar="[PLATFORM=]REF", multiple=True, callback=base_images_option,
                     help="Build FROM this image instead of the matrix's base: a mirror, a digest "
                     "(nvidia/cuda@sha256:...) or a locally made image; PLATFORM=REF for one platform "
                     "(--base-image linux/arm64=local/debian:bookworm-arm64), repeatable."),
        click.option("--apt-mirror", metavar="URL", help="Fetch OS packages from this mirror."),
        click.option("--ca-bundle", type=click.Path(path_type=Path), help="PEM bundle pip and uv trust inside "
                     "the build, for TLS-intercepting proxies; mounted as a secret, never in a layer. Default: the "
                     "file named by SSL_CERT_FILE, REQUESTS_CA_BUNDLE or PIP_CERT."),
        click.option("--pip-index-url", metavar="URL", help="The index inside the build (a mirror)."),
        click.option("--pip-extra-index-url", metavar="URL", multiple=True, help="Another index (repeatable)."),
        click.option("--wheelhouse", type=click.Path(path_type=Path), help="Directory of wheels the installers "
                     "take first; mounted into the install steps, never copied into a layer."),
        click.option("--docker", "docker_binary", metavar="PATH", help="The docker client to build with "
                     "(default: $IMAGEGEN_DOCKER, else the first that builds with BuildKit)."),
        click.option("--builder", metavar="NAME", help="A buildx builder, e.g. a remote BuildKit."),
        click.option("--context-dir", type=click.Path(path_type=Path), default=Path("build/contexts"),
                     show_default=True, help="Where the build contexts are rendered."),
        click.option("--no-cache", is_flag=True, help="Run every step again, as on a clean engine (the cache "
                     "mounts of apt and pip stay). The inputs, and so the version tag, stay the same."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def report_option(kind: str):
    def replaceable(context, parameter, path: Path) -> Path:
        """Before any work: the report goes to a new file or replaces an earlier one of its kind, nothing else."""
        from imagegen.stages.results import why_not_replaceable

        problem = why_not_replaceable(path, kind)
        if problem:
            raise click.BadParameter(problem)
        return path

    return click.option("--report", "report_path", type=click.Path(path_type=Path), callback=replaceable,
                        default=Path(f"reports/{kind}.json"), show_default=True,
                        help=f"Write the {kind} results here as JSON (a new file, or an earlier {kind} report).")


def checked_registry(context, parameter, registry: str | None) -> str | None:
    """--registry, by the distribution spec's grammar, before any work."""
    problem = registry_problem(registry) if registry else None
    if problem:
        raise click.BadParameter(problem)
    return registry


def registry_options(command):
    options = [
        click.option("--registry-user", metavar="USER", help="User name for the registry; default: what "
                     "`docker login` stored (docker config and credential helpers)."),
        click.option("--registry-password-stdin", is_flag=True, help="Read the registry password or token "
                     "from stdin (with --registry-user)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def compression_option(command):
    """--compression of `push` and `build --push`: one option, handed over as `compression`."""
    return click.option(
        "--compression", type=click.Choice(COMPRESSIONS), default="gzip", show_default=True,
        help="Of the layers pushed. gzip: every engine pulls it. zstd (through skopeo): the smallest, and the fastest "
        "pull on Docker 26 with the containerd image store (Docker 29's default; 0.64 of Docker 20.10's gzip time in "
        "bench section 16); Docker 23.0+, containerd 1.5+ and podman pull it, Docker 20.10 cannot, so gzip stays the "
        "default. none: the layers as the engine holds them, the fastest pull on Docker's overlay2 store (0.68-0.73) "
        "from a registry near the nodes, at about twice gzip's bytes; push it to the mirror, or to a namespace of its "
        "own (HOST/NS/raw). docs/user-guide.md, 'Layer compression', says which for which engine.")(command)


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


def test_options(command):
    options = [
        click.option("--require-gpu", is_flag=True, help="Fail, instead of skip, the GPU checks when the "
                     "engine cannot hand out GPUs."),
        click.option("--skip-train", is_flag=True, help="Leave out the two-step GRPO run of the selftest."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


