"""The build -> test -> push pipeline over selected images, with reports and a summary."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from imagegen.engine import containers, progress
from imagegen.core import platforms, sizes
from imagegen.stages import buildable, checks, publish, sbom
from imagegen.render import output, tags
from imagegen.render.contexts import RenderOptions
from imagegen.stages.build import Builder, PipSettings, check_pip_settings, detect_ca_bundle, provenance_labels
from imagegen.engine.buildkit import find_build_client
from imagegen.core.errors import UserError
from imagegen.core.text import aligned
from imagegen.render.locked import LockedImage
from imagegen.engine.registry import skopeo
from imagegen.engine.registry.http import Credentials, tag_digest
from imagegen.stages.results import BuildResult, PushResult, ReportError, TestResult, read_report, write_json

Echo = Callable[[str], None]


@dataclass(frozen=True)
class Checking:
    """How images are checked from the inside."""

    inventory_program: str  # stages.inventory.program: what the checks and the SBOM read each image with
    runner: ModuleType | None  # stages.inventory.runner: the contract's check runner; None where nothing is tested
    require_gpu: bool = False
    skip_train: bool = False


@dataclass(frozen=True)
class Run:
    images: list[LockedImage]  # rendered with render_options
    render_options: RenderOptions
    source_dir: Path  # the repository the inputs come from: its commit is the images' revision
    pip: PipSettings
    docker_binary: str | None
    builder: str | None
    context_dir: Path
    no_cache: bool
    keep_going: bool
    test: bool
    checking: Checking
    registry: str | None
    force: bool
    report_path: Path
    credentials: Credentials | None = None
    progress: str = "auto"  # "auto" | "tty" | "plain": see progress.view_for
    compression: str = "gzip"  # of the pushed layers: one of registry.COMPRESSIONS, as `imagegen push` takes it
    allow_unhashed: bool = False  # build an image whose lock has an artifact without a sha256 (labelled so)


def pip_settings(ca_bundle: Path | None, index_url: str | None, extra_index_urls: tuple[str, ...],
                 wheelhouse: Path | None) -> PipSettings:
    settings = PipSettings(ca_bundle or detect_ca_bundle(), index_url, tuple(extra_index_urls),
                           wheelhouse.resolve() if wheelhouse else None)
    check_pip_settings(settings)
    return settings


def build_test_push(run: Run, echo: Echo) -> int:
    """Build each image, then test and push it as asked; 0 when every image made it."""
    if run.registry and run.compression == "zstd":
        skopeo.require_skopeo()  # before the build: a push that cannot happen should not cost one
    unhashed = unhashed_artifacts(run.images)
    buildable.refuse_unbuildable(run.images, run.render_options, run.allow_unhashed,
                                 buildable.engine_or_registry(containers.has_image, tag_digest))
    client = find_build_client(run.docker_binary, run.builder)
    echo(f"build client: {client.why}")
    _check_local_bases(run.images, run.render_options)
    output.write(run.context_dir, run.images)
    builder = Builder(client, run.pip, run.report_path.parent / "logs", progress.view_for(run.progress, echo),
                      guides=_last_layer_times(run.report_path), no_cache=run.no_cache)
    provenance = provenance_labels(run.source_dir, client)
    built: list[BuildResult] = []
    tested: list[TestResult] = []
    pushed: list[PushResult] = []
    for image in run.images:
        if not run.keep_going and any(result.status == "failed" for result in built):
            built.append(BuildResult(image.name, image.ref(), "skipped", platform=image.platform))
            continue
        allowed = {UNHASHED_LABEL: unhashed[image.name]} if image.name in unhashed else {}
        labels = tags.built_on(image.labels, run.render_options.base_image(image.platform))
        result = builder.build(image, list(image.contexts), {**labels, **provenance, **allowed})
        result.unhashed = list(allowed.values())
        built.append(result)
        if result.status == "built":
            _add_sbom(result, image, run.report_path.parent, run.checking.inventory_program, echo)  # an image that cannot list its packages fails
        if result.status != "built":
            continue
        if run.test:
            tested.append(_test_one(image.ref(), image, run.checking, echo))
            if run.registry:
                pushed.append(_push_tested(image, result.image_id, tested[-1], run, echo))
    if run.registry:
        pushed += _push_indexes(run.images, pushed, run.registry, run.force, run.credentials, echo)
    write_json(run.report_path, "build", built)
    if run.test:
        write_json(run.report_path.with_name("test.json"), "test", tested)
    if run.registry:
        write_json(run.report_path.with_name("push.json"), "push", pushed)
    echo(build_summary(built, tested, pushed))
    failed = any(r.status != "built" for r in built) or any(not t.passed for t in tested) \
        or any(p.status != "pushed" for p in pushed)
    return 1 if failed else 0


UNHASHED_LABEL = "io.imagegen.unhashed"  # what an image built with --allow-unhashed installed without a hash


def unhashed_artifacts(images: list[LockedImage]) -> dict[str, str]:
    """Image name -> the requirement of its artifact that has no sha256 (a wheel locked where its host was down)."""
    return {image.name: image.lock.unhashed for image in images if image.lock.unhashed}


def _last_layer_times(report_path: Path) -> dict[tuple[str, str], float]:
    """How long each layer took when the previous run built it: a guide while it builds again."""
    try:
        previous = read_report(report_path, "build") if report_path.exists() else {}
    except ReportError:
        return {}  # a report of another shape only loses the guide
    return {(result.image, layer.layer): layer.duration_s for result in previous.values()
            for layer in result.layers if layer.status == "built"}


def _check_local_bases(images: list[LockedImage], options: RenderOptions) -> None:
    """A --base-image found in the local engine must be of the platform it is the base for: a local
    amd64 Debian under an arm64 build would give an image whose binaries do not run."""
    for image in images:
        base = options.base_image(image.platform)
        try:
            found = containers.image_facts(base)["platform"] if base else None
        except containers.ContainerError:
            continue  # not local: the engine fetches the platform it builds for
        if found and found != image.platform:
            raise UserError(f"--base-image {base} is a {found} image, and {image.key} is built for {image.platform}: "
                            f"pass --base-image {image.platform}=REF with a {image.platform} image, or --platform "
                            f"{found} to build only that platform")


def test_images(image_ref: str | None, images: list[LockedImage], checking: Checking, report_path: Path,
                echo: Echo) -> int:
    targets = [(image_ref, None)] if image_ref else [(image.ref(), image) for image in images]
    results = [_test_one(ref, image, checking, echo) for ref, image in targets]
    write_json(report_path, "test", results)
    echo(test_summary(results))
    return 0 if all(result.passed for result in results) else 1


def push_images(images: list[LockedImage], registry: str, skip_tests: bool, force: bool, test_report: Path,
                report_path: Path, echo: Echo, inventory_program: str, credentials: Credentials | None = None,
                index_only: bool = False, compression: str = "gzip", sign_key: Path | None = None) -> int:
    """Push each image (each platform's), then the index of each image of several platforms; with
    index_only, only the indexes, of platform images pushed before (by one job per platform)."""
    if index_only:
        grouped = _multi_platform_images(images)
        if not grouped:
            raise UserError("--index: none of these images is built for several platforms")
        results = [publish.push_index(members, registry, force, credentials) for members in grouped.values()]
        for result in results:
            echo(_push_line(result))
        write_json(report_path, "push", results)
        return 0 if all(result.status == "pushed" for result in results) else 1
    tests = None if skip_tests else _read_tests(test_report)
    client = containers.docker_client()
    results = []
    for image in images:
        image_id = containers.image_facts(image.ref(), client=client)["id"]
        sbom_file = sbom.path_for(report_path.parent, image.key)
        sbom.write(sbom_file, sbom.of_image(image_id, inventory_program, client=client))
        results.append(publish.push_if_tested(image, image_id, tests, registry, force, credentials, sbom_file,
                                              compression, sign_key))
        echo(_push_line(results[-1]))
    results += _push_indexes(images, results, registry, force, credentials, echo)
    write_json(report_path, "push", results)
    return 0 if all(result.status == "pushed" for result in results) else 1


def _test_one(ref: str, image: LockedImage | None, checking: Checking, echo: Echo) -> TestResult:
    echo(f"testing {ref}")
    result = checks.test_image(ref, image, checking.require_gpu, checking.skip_train, checking.inventory_program,
                               checking.runner)
    for check in result.checks:
        echo(f"  {check.status:4}  {check.name}: {check.detail}")
    return result


def _add_sbom(result: BuildResult, image: LockedImage, reports_dir: Path, program: str, echo: Echo) -> None:
    """The image's SBOM next to the build report; an image that cannot list its packages fails."""
    path = sbom.path_for(reports_dir, image.key)
    try:
        made = sbom.of_image(result.image_id, program)
    except UserError as error:
        result.status, result.failed_step = "failed", f"no SBOM: {error}"
        return
    sbom.write(path, made)
    result.sbom_file, result.sbom_components = str(path), made.counts
    echo(f"{image.key}: SBOM {path}: {made.python_components} Python distributions, "
         f"{made.os_components} OS packages")


def _push_tested(image: LockedImage, image_id: str, test: TestResult, run: Run, echo: Echo) -> PushResult:
    result = publish.push_if_tested(image, image_id, {image.key: test}, run.registry, run.force, run.credentials,
                                    sbom.path_for(run.report_path.parent, image.key), run.compression)
    echo(_push_line(result))
    return result


def _push_indexes(images: list[LockedImage], pushed: list[PushResult], registry: str, force: bool,
                  credentials: Credentials | None, echo: Echo) -> list[PushResult]:
    """The multi-platform index of each image of several platforms, once every platform was pushed here;
    an image built here for some of its platforms only (one CI job per platform) waits for the others."""
    results = []
    for name, members in _multi_platform_images(images).items():
        done = {result.platform for result in pushed if result.image == name and result.status == "pushed"}
        missing = [p for p in members[0].platforms if p not in done]
        if missing:
            echo(f"{name}: its index waits for its {', '.join(missing)} image; once every platform's image is "
                 f"in the registry, `imagegen push --index --image {name}` lists them under its tags")
            continue
        results.append(publish.push_index(members, registry, force, credentials))
        echo(_push_line(results[-1]))
    return results


def _multi_platform_images(images: list[LockedImage]) -> dict[str, list[LockedImage]]:
    """The images of each image built for several platforms, by image name, in the order given."""
    grouped: dict[str, list[LockedImage]] = {}
    for image in images:
        if len(image.platforms) > 1:
            grouped.setdefault(image.name, []).append(image)
    return grouped


def _read_tests(path: Path) -> dict[str, TestResult]:
    if not path.exists():
        raise UserError(f"{path}: no test report; run `imagegen test` first, or pass --skip-tests")
    return read_report(path, "test")


def _push_line(result: PushResult) -> str:
    if result.status == "pushed":
        tags = ", ".join(result.pushed_tags + [f"{t} (already published)" for t in result.already_published])
        line = f"pushed {result.image} to {result.registry}/{result.repository}: {tags} @ {result.digest}"
        if result.pushed_tags and result.platform != platforms.INDEX:
            line += f" ({result.layers} layers)"
        if result.sbom_digest:
            line += f"; SBOM {result.sbom_digest} refers to it, found by {result.sbom_found_by}"
        if result.provenance_digest:
            line += f"; provenance {result.provenance_digest}"
        line += f"; provenance not attached: {result.provenance_error}" if result.provenance_error else ""
        return line + (f"; SBOM not attached: {result.sbom_error}" if result.sbom_error else "")
    return f"not pushed {result.image}: {result.reason}"


def build_summary(built: list[BuildResult], tested: list[TestResult], pushed: list[PushResult]) -> str:
    """A row per image and platform; the test column says how it was tested (natively, under emulation)."""
    tests = {platforms.key(t.image, t.platform): t for t in tested}
    pushes = {platforms.key(p.image, p.platform): p for p in pushed}
    rows = [("image", "platform", "tag", "build", "time", "size", "id", "test", "push")]
    for result in built:
        key = platforms.key(result.image, result.platform)
        test, push = tests.get(key), pushes.get(key)
        rows.append((result.image, result.platform, result.ref.rsplit(":", 1)[1], result.status,
                     f"{result.duration_s:.0f}s", f"{result.size_bytes / 1e9:.2f}GB" if result.size_bytes else "-",
                     (result.image_id or "-").replace("sha256:", "")[:12],
                     f"{test.status} ({test.mode})" if test else "-", push.status if push else "-"))
    lines = aligned(rows)
    for result in built:
        if result.status == "failed":
            where = f" in layer {result.failed_layer} at" if result.failed_layer else ""
            lines.append(f"\n{platforms.key(result.image, result.platform)} failed{where}: {result.failed_step}")
            lines += [f"  | {line}" for line in result.log_tail[-10:]]
            if result.hint:
                lines.append(f"  {result.hint}")
            if result.largest_paths:
                lines.append(f"  its {len(result.largest_paths)} largest files:")
                lines += [f"  {sizes.human(entry['bytes']):>10}  {entry['path']}" for entry in result.largest_paths]
            lines.append(f"  full log: {result.log_file}")
    return "\n".join(lines)


def test_summary(results: list[TestResult]) -> str:
    rows = [("image", "status", "tested", "pass", "fail", "skip")]
    for result in results:
        counts = {status: sum(c.status == status for c in result.checks) for status in ("pass", "fail", "skip")}
        rows.append((result.ref, result.status, result.mode, str(counts["pass"]), str(counts["fail"]),
                     str(counts["skip"])))
    return "\n".join(aligned(rows))
