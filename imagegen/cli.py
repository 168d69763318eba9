"""The imagegen command line: validate, matrix, render, build, test, push."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from imagegen.reports import listing, page as report_page
from imagegen.stages import pipeline, sbom
from imagegen.matrix import plan
from imagegen.render import contexts as render_module
from imagegen.matrix import rules
from imagegen.core.errors import MatrixError, UserError
from imagegen.matrix.plan import ImageSpec
from imagegen.engine.registry import Credentials
from imagegen.matrix.schema import PLATFORMS
from imagegen.matrix.select import Selection, choose
from imagegen.workspace import Workspace, require_locked


def selection_options(command):
    """--cuda, --torch, --python, --image and --all, combined with AND, handed over as `selection`."""
    options = [
        click.option("--cuda", metavar="X.Y", help="Images on this CUDA; 12.4 matches 12.4.x."),
        click.option("--torch", "torch_version", metavar="X.Y", help="Images with this torch; 2.5 matches 2.5.x."),
        click.option("--python", metavar="X.Y", help="Images with this Python."),
        click.option("--image", "images", metavar="NAME", multiple=True, help="The image of this name (repeatable)."),
        click.option("--all", "all_images", is_flag=True, help="Every image of the matrix."),
        click.option("--platform", type=click.Choice(PLATFORMS), help="Only this platform of images built for "
                     "several (default: each of an image's platforms)."),
    ]

    @functools.wraps(command)
    def wrapper(*args, cuda, torch_version, python, images, all_images, platform, **kwargs):
        selection = Selection(cuda=cuda, torch=torch_version, python=python, images=tuple(images), all=all_images,
                              platform=platform)
        return command(*args, selection=selection, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def workspace_options(command):
    """--matrix, --locks, --templates and --trainer, handed over as `workspace`."""
    options = [
        click.option("--matrix", "matrix_path", type=click.Path(path_type=Path), default=Workspace.matrix,
                     show_default=True, help="The compatibility matrix."),
        click.option("--locks", "locks_dir", type=click.Path(path_type=Path), help="Directory of the image "
                     "locks (default: locks/ beside the matrix)."),
        click.option("--templates", type=click.Path(path_type=Path), default=Workspace.templates,
                     help="Directory of the layer templates."),
        click.option("--trainer", "trainer_dir", type=click.Path(path_type=Path), default=Workspace.trainer,
                     help="The trainer distribution baked into the images."),
    ]

    @functools.wraps(command)
    def wrapper(*args, matrix_path, locks_dir, templates, trainer_dir, **kwargs):
        return command(*args, workspace=Workspace(matrix_path, templates, trainer_dir, locks_dir), **kwargs)

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


def _base_images(context, parameter, values) -> tuple[tuple[str, str], ...]:
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


def load_selected(workspace: Workspace, selection: Selection, locked: bool = True) -> list[ImageSpec]:
    """The selected images; with locked, only when each has a current lock."""
    _, specs = workspace.load()
    chosen = choose(specs, selection)
    return require_locked(chosen) if locked else chosen


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
def validate(workspace):
    """Check matrix.yaml: keys and types, that every image's versions fit together, and that each
    image has a current lock that agrees with the matrix's facts. Reads no network.

    Each problem names the file, line and key, the rule broken and what is allowed, and for a
    missing or stale lock the command that refreshes it. Exits 2 when any problem is found.
    """
    loaded, specs = workspace.load()
    problems = plan.lock_problems(loaded, specs)
    if problems:
        raise MatrixError(problems)
    for warning in rules.warnings(loaded) + [f"{s.name}: {s.lock.base.note}" for s in specs if s.lock.base.note]:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"{workspace.matrix}: {len(specs)} images valid, each locked")


@main.command()
@selection_options
@click.option("--format", "output_format", type=click.Choice(sorted(listing.FORMATS)), default="table",
              show_default=True, help="github prints a strategy.matrix include list for fromJSON.")
@workspace_options
@reports_user_errors
def matrix(selection, output_format, workspace):
    """List the images of the matrix with every component version and tag.

    An image without a current lock has no version tag yet (its tag carries the digest of its
    inputs, the lock among them); the table says so.
    """
    specs = load_selected(workspace, selection, locked=False)
    click.echo(listing.FORMATS[output_format](specs))


@main.command()
@selection_options
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Directory for the build contexts.")
@click.option("--base-image", "base_images", metavar="[PLATFORM=]REF", multiple=True, callback=_base_images,
              help="Build FROM this image instead of the matrix's base (a mirror, a digest, a locally made image); "
              "PLATFORM=REF for one platform (repeatable).")
@click.option("--apt-mirror", metavar="URL", help="Fetch OS packages from this mirror.")
@workspace_options
@reports_user_errors
def render(selection, out, base_images, apt_mirror, workspace):
    """Write one build context per image and layer: OUT/IMAGE/LAYER/Dockerfile and its files.

    Each image needs a current lock: its framework layer installs exactly what the lock pins.
    Rendering the same inputs twice gives byte-identical output; a failed render leaves the
    previous output untouched.
    """
    specs = load_selected(workspace, selection)
    options = render_module.RenderOptions(base_images, apt_mirror)
    contexts = render_module.render_specs(workspace.templates, workspace.trainer, specs, options)
    render_module.write(out, [c for layers in contexts.values() for c in layers], specs)
    for spec in specs:
        base = options.base_image(spec.platform) or spec.lock.base.pinned_ref
        click.echo(f"{out / spec.key}: {spec.ref()} FROM {base}")


def build_options(command):
    options = [
        click.option("--base-image", "base_images", metavar="[PLATFORM=]REF", multiple=True, callback=_base_images,
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
    return click.option("--report", "report_path", type=click.Path(path_type=Path),
                        default=Path(f"reports/{kind}.json"), show_default=True,
                        help=f"Write the {kind} results here as JSON.")


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


def registry_credentials(user: str | None, password_stdin: bool) -> Credentials | None:
    """Credentials from the command line; None leaves them to the docker config."""
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


@main.command()
@selection_options
@build_options
@click.option("--keep-going", is_flag=True, help="Go on with the other images after one fails.")
@click.option("--progress", "progress_mode", type=click.Choice(["auto", "tty", "plain"]), default="auto",
              show_default=True, help="tty: one live line per image and layer; plain: BuildKit's whole output "
              "(for CI logs); auto: tty on a terminal. The whole output always goes to REPORT_DIR/logs/.")
@click.option("--test", "run_tests", is_flag=True, help="Test each image right after it is built.")
@test_options
@click.option("--push", "run_push", is_flag=True, help="Push each image whose tests passed (implies --test).")
@click.option("--registry", metavar="HOST[/NAMESPACE]", help="Where --push publishes.")
@click.option("--force", is_flag=True, help="Overwrite a version tag that holds another image.")
@registry_options
@report_option("build")
@workspace_options
@reports_user_errors
def build(selection, base_images, apt_mirror, ca_bundle, pip_index_url, pip_extra_index_url, wheelhouse,
          docker_binary, builder, context_dir, no_cache, keep_going, progress_mode, run_tests, require_gpu,
          skip_train, run_push, registry, force, registry_user, registry_password_stdin, report_path, workspace):
    """Build the selected images with BuildKit, layer by layer, then summarise.

    Each image is three layers (base, framework, trainer), each FROM the one before; a
    layer several images share is built once. With --test and --push, each image is
    tested, then pushed only if its tests passed. Exits 1 when any image failed.

    \b
    Examples:
      imagegen build --cuda 12.4
      imagegen build --image cpu --base-image local/debian:bookworm --wheelhouse wheels/
      imagegen build --cuda 12.4 --push --registry ghcr.io/acme
    """
    if selection.empty:
        raise UserError("choose what to build: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    if run_push and not registry:
        raise UserError("--push needs --registry HOST[/NAMESPACE], e.g. --registry ghcr.io/acme")
    credentials = registry_credentials(registry_user, registry_password_stdin)
    specs = load_selected(workspace, selection)
    run = pipeline.Run(
        workspace=workspace, specs=specs, render_options=render_module.RenderOptions(base_images, apt_mirror),
        pip=pipeline.pip_settings(ca_bundle, pip_index_url, pip_extra_index_url, wheelhouse),
        docker_binary=docker_binary, builder=builder, context_dir=context_dir, no_cache=no_cache,
        keep_going=keep_going,
        test=run_tests or run_push, require_gpu=require_gpu, skip_train=skip_train,
        registry=registry if run_push else None, force=force, report_path=report_path, credentials=credentials,
        progress=progress_mode)
    sys.exit(pipeline.build_test_push(run, echo=lambda line: click.echo(line, err=True)))


@main.command("test")
@click.argument("image_ref", required=False, metavar="[IMAGE]")
@selection_options
@test_options
@report_option("test")
@workspace_options
@reports_user_errors
def test_command(image_ref, selection, require_gpu, skip_train, report_path, workspace):
    """Check images from the inside and report each check as pass, fail or skip.

    IMAGE is any image reference (its labels say what it should hold); without it, the
    selected images of the matrix are tested under their version tags. GPU checks run
    when the engine can hand out GPUs and are skipped, with the reason, when it cannot.
    Exits 1 when any check failed.
    """
    specs = [] if image_ref else load_selected(workspace, selection)
    sys.exit(pipeline.test_images(image_ref, specs, require_gpu, skip_train, report_path,
                                  echo=lambda line: click.echo(line, err=True)))


@main.command()
@selection_options
@click.option("--registry", metavar="HOST[/NAMESPACE]", required=True, help="Where to publish.")
@click.option("--skip-tests", is_flag=True, help="Push without a passing test result (not recommended).")
@click.option("--force", is_flag=True, help="Overwrite a version tag that holds another image.")
@click.option("--test-report", type=click.Path(path_type=Path), default=Path("reports/test.json"),
              show_default=True, help="The test results that allow a push.")
@click.option("--index", "index_only", is_flag=True, help="Only list each image's platform images, pushed "
              "before by one job per platform, in a multi-platform index under its tags.")
@registry_options
@report_option("push")
@workspace_options
@reports_user_errors
def push(selection, registry, skip_tests, force, test_report, index_only, registry_user, registry_password_stdin,
         report_path, workspace):
    """Push the selected images whose tests passed, under every tag.

    Version tags are immutable: when the registry already holds one with another image,
    the push is refused unless --force; one with another build of the same inputs is already
    published. Moving aliases (cu12.4, latest, the image's name) are updated. An image of
    several platforms goes as one image per platform (VERSION-amd64, VERSION-arm64), then one
    index of them under the version tag and the aliases. Exits 1 when any image was not pushed.
    """
    if selection.empty:
        raise UserError("choose what to push: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    credentials = registry_credentials(registry_user, registry_password_stdin)
    specs = load_selected(workspace, selection)
    sys.exit(pipeline.push_images(specs, registry, skip_tests, force, test_report, report_path,
                                  echo=lambda line: click.echo(line, err=True), credentials=credentials,
                                  index_only=index_only))


@main.command()
@selection_options
@workspace_options
@reports_user_errors
def lock(selection, workspace):
    """Resolve each selected image's Python stack from the index into locks/IMAGE.json.

    uv resolves torch and torchvision (from the PyTorch index for a CUDA build PyPI does not
    serve), flash-attn's needs, DeepSpeed, transformers, TRL, accelerate, peft, the trainer's
    requirements and every transitive dependency, for the image's own Python and platform,
    from index metadata alone, with the hashes of every file. The lock also records the digest
    the base image's tag points to (when the registry answers) and what it was resolved from,
    so that `imagegen validate` can tell, offline, when it is stale. Exits 1 when an image
    cannot be locked; the others are still written.

    \b
    Examples:
      imagegen lock --image cpu --image cu124-torch2.6
      imagegen lock --all
    """
    from imagegen.locking import resolve as lock_module

    if selection.empty:
        raise UserError("choose what to lock: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    loaded, specs = workspace.load()
    failed = 0
    names = dict.fromkeys(spec.name for spec in choose(specs, selection))
    chosen = [spec for spec in specs if spec.name in names]  # a lock file holds every platform of its image
    for name in names:
        try:
            outcomes = [lock_module.lock_image(spec, workspace.lock_command(name)) for spec in chosen
                        if spec.name == name]
        except UserError as error:
            failed += 1
            line = loaded.located.line_of(("images", plan.index_of(loaded, name)))
            click.echo(f"error: {name} ({workspace.matrix}:{line}): {error}", err=True)
            continue
        path = workspace.lock_path(name)
        lock_module.write_locks(path, [outcome.lock for outcome in outcomes])
        for outcome in outcomes:
            for warning in outcome.warnings:
                click.echo(f"warning: {name}: {warning}", err=True)
            click.echo(f"{path}: {lock_module.summary(outcome.lock)}")
    sys.exit(1 if failed else 0)


@main.group()
def facts():
    """The matrix's facts against the package index."""


@facts.command("check")
@workspace_options
@reports_user_errors
def facts_check(workspace):
    """Compare every fact of the matrix with what the index says, and print each disagreement.

    Reads the wheel metadata of every torch release and CUDA build the matrix lists (cuDNN and
    NCCL pins, CUDA runtime, Python range, C++ ABI, torchvision's torch), and of the stack's
    packages (Requires-Python, the torch they require), and lists flash-attn's GitHub
    release assets. An index that does not answer is reported as not checked. Exits 1 when
    the matrix disagrees with the index, 0 otherwise.
    """
    from imagegen.locking import facts as facts_module
    from imagegen.matrix import model as matrix_module

    report = facts_module.check(matrix_module.read(workspace.matrix))
    for problem in report.disagreements:
        click.echo(f"error: {problem}", err=True)
    for what, why in report.not_checked.items():
        click.echo(f"not checked: {what}: {why}", err=True)
    click.echo(f"{workspace.matrix}: {report.checked} facts checked against the index, "
               f"{len(report.disagreements)} disagree, {len(report.not_checked)} not checked")
    sys.exit(1 if report.disagreements else 0)


@main.command("sbom")
@click.argument("image_ref", metavar="IMAGE")
@click.option("--out", type=click.Path(path_type=Path), help="Write it to this file instead of stdout.")
@reports_user_errors
def sbom_command(image_ref, out):
    """Print the CycloneDX SBOM of a local image: every Python distribution and OS package in it.

    The image lists its own packages (its Python and its package manager answer); `imagegen
    build` writes the same document to reports/sbom/IMAGE.cdx.json and `--push` attaches it
    to the pushed image.
    """
    made = sbom.of_image(image_ref)
    if out:
        sbom.write(out, made)
        click.echo(f"{out}: {made.python_components} Python distributions, {made.os_components} OS packages",
                   err=True)
    else:
        click.echo(made.text, nl=False)


@main.command("report")
@click.option("--build", "build_report", type=click.Path(path_type=Path), default=Path("reports/build.json"),
              show_default=True, help="Build report; missing: the build cells say \"not run\".")
@click.option("--test", "test_report", type=click.Path(path_type=Path), default=Path("reports/test.json"),
              show_default=True, help="Test report; missing: the test cells say \"not run\".")
@click.option("--push", "push_report", type=click.Path(path_type=Path), default=Path("reports/push.json"),
              show_default=True, help="Push report; missing: the push cells say \"not run\".")
@click.option("--from", "reports_dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Read every build.json, test.json and push.json under this directory instead.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Directory for index.md and index.html.")
@workspace_options
@reports_user_errors
def report(build_report, test_report, push_report, reports_dir, out, workspace):
    """Write OUT/index.md and OUT/index.html: a row per image, its versions, build, tests and push.

    Reads whichever reports exist; a stage without a report shows "not run". --from DIR
    reads the reports of many jobs at once (a CI run's downloaded artifacts). Log links are
    relative to OUT, so keep the reports beside the page when moving it. Exits 2 when a
    report or the matrix cannot be read.
    """
    loaded, specs = workspace.load()
    found = report_page.read_reports(report_page.report_files(reports_dir, build_report, test_report, push_report))
    report_page.write_pages(out, workspace.templates, workspace.matrix, loaded.repository, specs, found)
    click.echo(f"{out / 'index.html'}: {len(specs)} images")


if __name__ == "__main__":  # pragma: no cover
    main()
