"""Commands on the plan: validate, matrix, render, lock, facts check."""

from __future__ import annotations

import sys

import click

from imagegen.cli.warnings import lines as warning_lines
from imagegen.cli.options import reports_user_errors, selection_options, workspace_options, load_selected
from imagegen.cli.fields import settings_options
from imagegen.cli.settings import FactsCheckSettings, MatrixSettings, RenderSettings
from imagegen.core.errors import MatrixError, UsageError, UserError
from imagegen.matrix import plan as plan_module
from imagegen.matrix.select import choose
from imagegen.render import output
from imagegen.render.contexts import RenderOptions
from imagegen.reports import drivers as driver_reports, listing


@click.command()
@workspace_options
@reports_user_errors
def validate(workspace):
    """Check matrix.yaml: keys and types, that every image's versions fit together, and that each
    image has a current lock that agrees with the matrix's facts. Reads no network.

    Each problem names the file, line and key, the rule broken and what is allowed, and for a
    missing or stale lock the command that refreshes it. Exits 2 when any problem is found.
    """
    plan = workspace.load()
    problems = plan.problems()
    if problems:
        raise MatrixError(problems)
    for warning in warning_lines(plan, workspace.lock_command):
        click.echo(f"warning: {warning}", err=True)
    names = dict.fromkeys(p.name for p in plan.images)
    locked = dict.fromkeys(image.name for image in plan.locked.values())
    click.echo(f"{workspace.matrix}: {len(names)} images valid ({len(plan.images)} image x platform builds), "
               f"{len(locked)} locked" + (f", {len(names) - len(locked)} to lock where the PyTorch index answers"
                                          if len(locked) < len(names) else ""))


@click.command()
@selection_options
@settings_options(MatrixSettings, into="settings")
@workspace_options
@reports_user_errors
def matrix(selection, settings: MatrixSettings, workspace):
    """List the images of the matrix with every component version and tag.

    An image without a current lock has no version tag yet (its tag carries the digest of its
    inputs, the lock among them); the table says so. With --driver, ask before pulling: which
    images the NVIDIA container toolkit starts on that driver, read from each image's
    NVIDIA_REQUIRE_CUDA as the toolkit reads it.
    """
    driver = settings.driver
    if driver is not None and (driver_reports.problem(driver) or settings.output_format != "table"):
        raise UsageError(driver_reports.problem(driver) or "--driver prints a table: leave out --format")
    plan = workspace.load()
    rows = listing.listed(plan, choose(plan.images, selection, plan.matrix.components))
    if driver is not None:
        click.echo(driver_reports.report(rows, driver, plan.matrix.drivers.branches))
        return
    click.echo(listing.FORMATS[settings.output_format](rows))


@click.command()
@selection_options
@settings_options(RenderSettings, into="settings")
@workspace_options
@reports_user_errors
def render(selection, settings: RenderSettings, workspace):
    """Write one build context per image and layer: OUT/IMAGE/LAYER/Dockerfile and its files.

    Each image needs a current lock: its framework layer installs exactly what the lock pins.
    Rendering the same inputs twice gives byte-identical output; a failed render leaves the
    previous output untouched.
    """
    options, out = RenderOptions(settings.base_images, settings.apt_mirror), settings.out
    images = load_selected(workspace, selection, options)
    output.write(out, images)
    for image in images:
        base = options.base_image(image.platform) or image.lock.base.pinned_ref
        click.echo(f"{out / image.key}: {image.ref()} FROM {base}")


@click.command()
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
    plan = workspace.load()
    loaded = plan.matrix
    failed = 0
    names = dict.fromkeys(p.name for p in choose(plan.images, selection, plan.matrix.components))
    chosen = [p for p in plan.images if p.name in names]  # a lock file holds every platform of its image
    for name in names:
        try:
            outcomes = [lock_module.lock_image(p, workspace.lock_command(name)) for p in chosen if p.name == name]
        except UserError as error:
            failed += 1
            line = loaded.located.line_of(("images", plan_module.index_of(loaded, name)))
            click.echo(f"error: {name} ({workspace.matrix}:{line}): {error}", err=True)
            continue
        path = workspace.lock_path(name)
        lock_module.write_locks(path, [outcome.lock for outcome in outcomes])
        for outcome in outcomes:
            for warning in outcome.warnings:
                click.echo(f"warning: {name}: {warning}", err=True)
            click.echo(f"{path}: {lock_module.summary(outcome.lock, loaded.components.torch_families.values())}")
    sys.exit(1 if failed else 0)


@click.group()
def facts():
    """The matrix's facts against the package index."""


@facts.command("update")
@click.argument("releases", nargs=-1, required=True, metavar="NAME==VERSION...")
@workspace_options
@reports_user_errors
def facts_update(workspace, releases):
    """Add releases to the matrix with their facts as PyPI serves them.

    torch==X adds the release with PyPI's CUDA build (its cuDNN, NCCL, Pythons, C++ ABI, archs,
    C++ standard, platforms) and the torchvision released with it; a package of the matrix
    (transformers==X, trl==X, ...) adds its Requires-Python and the torch it requires. Each is
    appended to its section with its source, the file's comments kept; the PyTorch index's
    builds and a CUDA line's bases are not on PyPI and are added by hand with a source.

    \b
    Examples:
      imagegen facts update torch==2.15.0
      imagegen facts update transformers==5.24.0 trl==1.16.0
    """
    from imagegen.facts import update as updater

    for line in updater.update(workspace.matrix, releases):
        click.echo(f"{workspace.matrix}: {line}")


@facts.command("check")
@settings_options(FactsCheckSettings, into="settings")
@workspace_options
@reports_user_errors
def facts_check(workspace, settings: FactsCheckSettings):
    """Compare every fact of the matrix with what the index says, and print each disagreement.

    Reads the wheel metadata of every torch release and CUDA build the matrix lists (cuDNN and
    NCCL pins, CUDA runtime, Python range, C++ ABI, torchvision's torch), and of the stack's
    packages (Requires-Python, the torch they require, what their extras require of the other
    pins of each image), the CUDA that PyPI's torch carries into an image without a CUDA base,
    each lock's pins against its torch wheel, each lock entry's recorded requirements against its
    metadata on the index, what each PyPI torch wheel was compiled for (archs),
    and lists flash-attn's GitHub release assets; says where a CUDA line has a newer update
    (cuda-toolkit on PyPI), as a warning; asks each base tag's registry (HTTP API v2) whether the
    tag exists. An index or registry that does
    not answer is reported as not checked, with the source the matrix gives for that fact. Exits
    1 when the matrix or a lock disagrees with the index or a registry (with --strict, also while
    a fact is not checked), 0 otherwise.
    """
    from imagegen.facts import check as facts_module
    from imagegen.matrix import model as matrix_module

    matrix = matrix_module.read(workspace.matrix)
    paths = [workspace.lock_path(image.name) for image in matrix.images]
    locks = {str(path): path.read_text(encoding="utf-8") for path in paths if path.is_file()}
    report = facts_module.check(matrix, locks, settings.base_registry)
    for problem in report.disagreements:
        click.echo(f"error: {problem}", err=True)
    for problem in report.newer:
        click.echo(f"warning: {problem}", err=True)
    for what, why in report.not_checked.items():
        click.echo(f"not checked: {what}: {why}", err=True)
    click.echo(f"{workspace.matrix}: {report.checked} facts checked against the indexes and registries, "
               f"{len(report.disagreements)} disagree, {len(report.not_checked)} not checked"
               f" ({len(report.unsourced)} of them without a source)"
               + (": --strict fails while any is not checked" if settings.strict and report.not_checked else ""))
    sys.exit(0 if report.complete or (not settings.strict and not report.disagreements) else 1)
