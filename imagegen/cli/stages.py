"""Commands on images: build, test, push, sbom, report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from imagegen.cli.options import (build_options, checked_registry, compression_option, given, load_selected,
                                  registry_credentials, registry_options, report_option, reports_user_errors,
                                  selection_options, test_options, workspace_options)
from imagegen.core.errors import UserError
from imagegen.render.contexts import RenderOptions
from imagegen.reports import listing

# The stages import docker-py, oras and cyclonedx: each command loads what it runs, so that `imagegen --help`
# and the commands on the plan start in a fraction of a second.


def program(workspace) -> str:
    """The inventory program the checks and the SBOM read images with: the trainer's."""
    from imagegen.stages import inventory
    from imagegen.workspace import read_trainer

    return inventory.program(workspace.trainer, read_trainer(workspace.trainer).package_folders)


@click.command()
@selection_options
@build_options
@click.option("--keep-going", is_flag=True, help="Go on with the other images after one fails.")
@click.option("--progress", "progress_mode", type=click.Choice(["auto", "tty", "plain"]), default="auto",
              show_default=True, help="tty: one live line per image and layer; plain: BuildKit's whole output "
              "(for CI logs); auto: tty on a terminal. The whole output always goes to REPORT_DIR/logs/.")
@click.option("--test", "run_tests", is_flag=True, help="Test each image right after it is built.")
@test_options
@click.option("--push", "run_push", is_flag=True, help="Push each image whose tests passed (implies --test).")
@click.option("--registry", metavar="HOST[/NAMESPACE]", callback=checked_registry, help="Where --push publishes.")
@compression_option
@click.option("--force", is_flag=True, help="Overwrite a version tag that holds another image.")
@click.option("--allow-unhashed", is_flag=True, help="Build an image whose lock holds an artifact without a sha256 "
              "(a flash-attn wheel locked where GitHub did not answer); the image's label io.imagegen.unhashed and "
              "the build report name it. Refused otherwise.")
@registry_options
@report_option("build")
@workspace_options
@reports_user_errors
def build(selection, base_images, apt_mirror, ca_bundle, pip_index_url, pip_extra_index_url, wheelhouse,
          docker_binary, builder, context_dir, no_cache, keep_going, progress_mode, run_tests, require_gpu,
          skip_train, run_push, registry, compression, force, allow_unhashed, registry_user, registry_password_stdin,
          report_path, workspace):
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
    if given("compression") and not run_push:
        raise UserError(f"--compression {compression} is of the layers --push sends: add --push --registry "
                        "HOST[/NAMESPACE], or leave --compression out")
    if run_push and not registry:
        raise UserError("--push needs --registry HOST[/NAMESPACE], e.g. --registry ghcr.io/acme")
    credentials = registry_credentials(registry_user, registry_password_stdin)
    options = RenderOptions(base_images, apt_mirror)
    from imagegen.stages import pipeline

    run = pipeline.Run(
        images=load_selected(workspace, selection, options), render_options=options,
        source_dir=workspace.matrix.parent,
        pip=pipeline.pip_settings(ca_bundle, pip_index_url, pip_extra_index_url, wheelhouse),
        docker_binary=docker_binary, builder=builder, context_dir=context_dir, no_cache=no_cache,
        keep_going=keep_going,
        test=run_tests or run_push, checking=pipeline.Checking(program(workspace), require_gpu, skip_train),
        registry=registry if run_push else None, force=force, report_path=report_path, credentials=credentials,
        progress=progress_mode, compression=compression, allow_unhashed=allow_unhashed)
    sys.exit(pipeline.build_test_push(run, echo=lambda line: click.echo(line, err=True)))


@click.command("test")
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
    images = [] if image_ref else load_selected(workspace, selection)
    from imagegen.stages import pipeline

    checking = pipeline.Checking(program(workspace), require_gpu, skip_train)
    sys.exit(pipeline.test_images(image_ref, images, checking, report_path,
                                  echo=lambda line: click.echo(line, err=True)))


@click.command()
@selection_options
@click.option("--registry", metavar="HOST[/NAMESPACE]", required=True, callback=checked_registry,
              help="Where to publish.")
@click.option("--skip-tests", is_flag=True, help="Push without a passing test result (not recommended).")
@click.option("--force", is_flag=True, help="Overwrite a version tag that holds another image.")
@click.option("--test-report", type=click.Path(path_type=Path), default=Path("reports/test.json"),
              show_default=True, help="The test results that allow a push.")
@click.option("--index", "index_only", is_flag=True, help="Only list each image's platform images, pushed "
              "before by one job per platform, in a multi-platform index under its tags.")
@compression_option
@registry_options
@report_option("push")
@workspace_options
@reports_user_errors
def push(selection, registry, skip_tests, force, test_report, index_only, compression, registry_user,
         registry_password_stdin, report_path, workspace):
    """Push the selected images whose tests passed, under every tag.

    Version tags are immutable: when the registry already holds one with another image,
    the push is refused unless --force; one with another build of the same inputs is already
    published. Moving aliases (cu12.4, latest, the image's name) are updated. An image of
    several platforms goes as one image per platform (VERSION-amd64, VERSION-arm64), then one
    index of them under the version tag and the aliases. Exits 1 when any image was not pushed.
    """
    if selection.empty:
        raise UserError("choose what to push: --cuda X.Y, --torch X.Y, --python X.Y, --image NAME or --all")
    if index_only and given("compression"):
        raise UserError(f"--index pushes no layers, only an index of the platform images pushed before (with the "
                        f"compression they were pushed with): leave --compression {compression} out")
    credentials = registry_credentials(registry_user, registry_password_stdin)
    images = load_selected(workspace, selection)
    from imagegen.stages import pipeline

    sys.exit(pipeline.push_images(images, registry, skip_tests, force, test_report, report_path,
                                  echo=lambda line: click.echo(line, err=True), inventory_program=program(workspace),
                                  credentials=credentials, index_only=index_only, compression=compression))


@click.command("sbom")
@click.argument("image_ref", metavar="IMAGE")
@click.option("--out", type=click.Path(path_type=Path), help="Write it to this file instead of stdout.")
@workspace_options
@reports_user_errors
def sbom_command(image_ref, out, workspace):
    """Print the CycloneDX SBOM of a local image: every Python distribution and OS package in it.

    The image lists its own packages (its Python and its package manager answer); `imagegen
    build` writes the same document to reports/sbom/IMAGE.cdx.json and `--push` attaches it
    to the pushed image.
    """
    from imagegen.stages import sbom

    made = sbom.of_image(image_ref, program(workspace))
    if out:
        sbom.write(out, made)
        click.echo(f"{out}: {made.python_components} Python distributions, {made.os_components} OS packages",
                   err=True)
    else:
        click.echo(made.text, nl=False)


@click.command("report")
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
    plan = workspace.load()
    from imagegen.reports import page as report_page

    found = report_page.read_reports(report_page.report_files(reports_dir, build_report, test_report, push_report))
    report_page.write_pages(out, workspace.templates, workspace.matrix, plan.matrix.repository,
                            listing.listed(plan, plan.images), found, plan.matrix.components)
    click.echo(f"{out / 'index.html'}: {len(plan.images)} image x platform rows")
