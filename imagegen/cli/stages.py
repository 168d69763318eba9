"""Commands on images: build, test, push, sbom, report."""

from __future__ import annotations

import sys

import click

from imagegen.cli.fields import settings_options
from imagegen.cli.options import (given, load_selected, registry_credentials, reports_user_errors, selection_options,
                                  workspace_options)
from imagegen.cli.settings import (BuildSettings, PushSettings, ReportSettings, SbomSettings, TestSettings,
                                   VerifySettings)
from imagegen.core.errors import UserError
from imagegen.render.contexts import RenderOptions
from imagegen.reports import listing

# The stages import docker-py, oras and cyclonedx: each command loads what it runs, so that `imagegen --help`
# and the commands on the plan start in a fraction of a second.


def program() -> str:
    """The inventory program the checks and the SBOM read images with: the contract's."""
    from imagegen.stages import inventory

    return inventory.program()


def runner():
    """The check runner the host's checks run by, as the image's own do: the contract's."""
    from imagegen.stages import inventory

    return inventory.runner()


def checking(require_gpu: bool, skip_train: bool):
    """How images are checked: by the contract's inventory program and its check runner."""
    from imagegen.stages import pipeline

    return pipeline.Checking(program(), runner(), require_gpu, skip_train)


@click.command()
@selection_options
@settings_options(BuildSettings, into="settings")
@workspace_options
@reports_user_errors
def build(selection, settings: BuildSettings, workspace):
    """Build the selected images with BuildKit, layer by layer, then summarise.

    Each image is three layers (base, framework, trainer), each FROM the one before; a
    layer several images share is built once. With --test and --push, each image is
    tested, then pushed only if its tests passed. Exits 1 when any image failed.

    \b
    Examples:
      imagegen build --cuda 12.4
      imagegen build --image cpu --base-image local/debian:bookworm --wheelhouse wheels/
      imagegen build --cuda 12.4 --push --registry ghcr.io/acme
      imagegen build --cuda 12.4 --push --registry ghcr.io/acme --compression zstd
    """
    if selection.empty:
        raise UserError("choose what to build: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    if given("compression") and not settings.push:
        raise UserError(f"--compression {settings.compression} is of the layers --push sends: add --push --registry "
                        "HOST[/NAMESPACE], or leave --compression out")
    if settings.push and not settings.registry:
        raise UserError("--push needs --registry HOST[/NAMESPACE], e.g. --registry ghcr.io/acme")
    sys.exit(_build_run(selection, settings, workspace))


def _build_run(selection, settings: BuildSettings, workspace) -> int:
    """Build, test and push as `settings` ask; 0 when every image made it."""
    credentials = registry_credentials(settings.registry_user, settings.registry_password_stdin)
    options = RenderOptions(settings.base_images, settings.apt_mirror)
    from imagegen.stages import pipeline

    run = pipeline.Run(
        images=load_selected(workspace, selection, options), render_options=options,
        source_dir=workspace.matrix.parent,
        pip=pipeline.pip_settings(settings.ca_bundle, settings.pip_index_url, settings.pip_extra_index_url,
                                  settings.wheelhouse),
        docker_binary=settings.docker_binary, builder=settings.builder, context_dir=settings.context_dir,
        no_cache=settings.no_cache, keep_going=settings.keep_going, test=settings.test or settings.push,
        checking=checking(settings.require_gpu, settings.skip_train),
        registry=settings.registry if settings.push else None, force=settings.force,
        report_path=settings.report_path, credentials=credentials, progress=settings.progress,
        compression=settings.compression, allow_unhashed=settings.allow_unhashed)
    return pipeline.build_test_push(run, echo=lambda line: click.echo(line, err=True))


@click.command("test")
@click.argument("image_ref", required=False, metavar="[IMAGE]")
@selection_options
@settings_options(TestSettings, into="flags")
@workspace_options
@reports_user_errors
def test_command(image_ref, selection, flags: TestSettings, workspace):
    """Check images from the inside and report each check as pass, fail or skip.

    IMAGE is any image reference (its labels say what it should hold); without it, the
    selected images of the matrix are tested under their version tags. GPU checks run
    when the engine can hand out GPUs and are skipped, with the reason, when it cannot.
    Exits 1 when any check failed.
    """
    images = [] if image_ref else load_selected(workspace, selection)
    from imagegen.stages import pipeline

    sys.exit(pipeline.test_images(image_ref, images, checking(flags.require_gpu, flags.skip_train),
                                  flags.report_path, echo=lambda line: click.echo(line, err=True)))


@click.command()
@selection_options
@settings_options(PushSettings, into="settings")
@workspace_options
@reports_user_errors
def push(selection, settings: PushSettings, workspace):
    """Push the selected images whose tests passed, under every tag.

    Version tags are immutable: when the registry already holds one with another image,
    the push is refused unless --force; one with another build of the same inputs is already
    published. Moving aliases (cu12.4, latest, the image's name) are updated. An image of
    several platforms goes as one image per platform (VERSION-amd64, VERSION-arm64), then one
    index of them under the version tag and the aliases. Exits 1 when any image was not pushed.
    """
    if selection.empty:
        raise UserError("choose what to push: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    if settings.index_only and given("compression"):
        raise UserError(f"--index pushes no layers, only an index of the platform images pushed before (with the "
                        f"compression they were pushed with): leave --compression {settings.compression} out")
    credentials = registry_credentials(settings.registry_user, settings.registry_password_stdin)
    images = load_selected(workspace, selection)
    from imagegen.stages import pipeline

    sys.exit(pipeline.push_images(images, settings.registry, settings.skip_tests, settings.force, settings.test_report,
                                  settings.report_path, echo=lambda line: click.echo(line, err=True),
                                  inventory_program=program(), credentials=credentials,
                                  index_only=settings.index_only, compression=settings.compression,
                                  sign_key=settings.sign_key))


@click.command("sbom")
@click.argument("image_ref", metavar="IMAGE")
@settings_options(SbomSettings, into="settings")
@workspace_options
@reports_user_errors
def sbom_command(image_ref, settings: SbomSettings, workspace):
    """Print the CycloneDX SBOM of a local image: every Python distribution and OS package in it.

    The image lists its own packages (its Python and its package manager answer); `imagegen
    build` writes the same document to reports/sbom/IMAGE.cdx.json and `--push` attaches it
    to the pushed image.
    """
    from imagegen.stages import sbom

    made, out = sbom.of_image(image_ref, program()), settings.out
    if out:
        sbom.write(out, made)
        click.echo(f"{out}: {made.python_components} Python distributions, {made.os_components} OS packages",
                   err=True)
    else:
        click.echo(made.text, nl=False)


@click.command("report")
@settings_options(ReportSettings, into="settings")
@workspace_options
@reports_user_errors
def report(settings: ReportSettings, workspace):
    """Write OUT/index.md and OUT/index.html: a row per image, its versions, build, tests and push.

    Reads whichever reports exist; a stage without a report shows "not run". --from DIR
    reads the reports of many jobs at once (a CI run's downloaded artifacts). Log links are
    relative to OUT, so keep the reports beside the page when moving it. Exits 2 when a
    report or the matrix cannot be read.
    """
    plan = workspace.load()
    from imagegen.reports import page as report_page

    found = report_page.read_reports(report_page.report_files(settings.reports_dir, settings.build_report,
                                                              settings.test_report, settings.push_report))
    out = settings.out
    report_page.write_pages(out, workspace.templates, workspace.matrix, plan.matrix.repository,
                            listing.listed(plan, plan.images), found, plan.matrix.components)
    click.echo(f"{out / 'index.html'}: {len(plan.images)} image x platform rows")


@click.command("verify")
@click.argument("image_ref", metavar="IMAGE")
@settings_options(VerifySettings, into="settings")
@reports_user_errors
def verify_command(image_ref, settings: VerifySettings):
    """Check a pushed image (REGISTRY/REPOSITORY:TAG or @DIGEST) against what `imagegen push` attached to it.

    Its SBOM and its SLSA provenance refer to its digest, and the provenance names this digest, the commit and the
    inputs digest its own labels state; with --key, the image and its provenance are signed by that key; an index has
    each of its platform images checked. Each failure is one line; exits 1 on any.
    """
    from imagegen.stages import provenance

    credentials = registry_credentials(settings.registry_user, settings.registry_password_stdin)
    problems = provenance.verify(image_ref, credentials, settings.key)
    for line in problems:
        click.echo(f"error: {line}", err=True)
    if not problems:
        click.echo(f"{image_ref}: its SBOM and provenance refer to it, the provenance names its digest, commit and "
                   "inputs" + (f", and both are signed by {settings.key}" if settings.key else ""))
    sys.exit(1 if problems else 0)
