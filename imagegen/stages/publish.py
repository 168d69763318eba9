"""Publish tested images: every tag to the registry, version tags never overwritten."""

from __future__ import annotations

from pathlib import Path

from imagegen.core import platforms
from imagegen.engine import registry as registry_module
from imagegen.stages import sbom
from imagegen.core.errors import UserError
from imagegen.render.locked import LockedImage
from imagegen.stages.results import PushResult, TestResult


def repository_name(image: LockedImage) -> str:
    """The image's name under the target registry: the last part of the matrix's repository."""
    return image.repository.rsplit("/", 1)[-1]


def untested_reason(image: LockedImage, image_id: str, tests: dict[str, TestResult]) -> str | None:
    """Why this exact image may not be pushed yet, or None when its tests passed."""
    result = tests.get(image.key)
    if result is None:
        return "no test result for this image; run `imagegen test` first or pass --skip-tests"
    if result.image_id != image_id:
        return (f"the tests ran on {result.image_id}, not on the image now tagged {image.ref()} ({image_id}); "
                "test the rebuilt image")
    if not result.passed:
        failed = [check.name for check in result.checks if check.status == "fail"]
        return f"its tests failed ({', '.join(failed)}); version tags only go to images that passed"
    return None


def platform_tags(image: LockedImage) -> tuple[list[str], list[str]]:
    """(version tags, aliases) the platform image goes under: an image of one platform under its tags,
    one of several under the version tag with its arch (cpu: 0.1.0-...-amd64); its index takes the tags."""
    if len(image.platforms) == 1:
        return [image.version_tag], list(image.alias_tags)
    return [platforms.arch_tag(image.version_tag, image.platform)], []


def push(image: LockedImage, image_id: str, registry: str, force: bool,
         credentials: registry_module.Credentials | None = None, sbom_file: Path | None = None) -> PushResult:
    repository = repository_name(image)
    result = PushResult(image=image.name, registry=registry, repository=repository, status="pushed",
                        platform=image.platform)
    version_tags, alias_tags = platform_tags(image)
    try:
        outcome = registry_module.push_image(image_id, registry, repository, version_tags, alias_tags, force,
                                             credentials=credentials)
    except UserError as error:
        result.status, result.reason = "failed", str(error)
        return result
    _record(result, outcome)
    if not outcome.refused and sbom_file and version_tags[0] in outcome.pushed_tags:  # a version published earlier has its SBOM
        _attach_sbom(result, sbom_file, credentials)
    return result


def _attach_sbom(result: PushResult, sbom_file: Path, credentials: registry_module.Credentials | None) -> None:
    try:
        attached = registry_module.attach_artifact(result.registry, result.repository, result.digest, sbom_file,
                                                   sbom.MEDIA_TYPE, credentials)
    except UserError as error:
        result.sbom_error = str(error)
        return
    result.sbom_digest, result.sbom_found_by = attached.digest, attached.found_by


def push_if_tested(image: LockedImage, image_id: str, tests: dict[str, TestResult] | None, registry: str,
                   force: bool, credentials: registry_module.Credentials | None = None,
                   sbom_file: Path | None = None) -> PushResult:
    """Push the image when its tests passed on this exact image id; tests=None skips the gate."""
    reason = None if tests is None else untested_reason(image, image_id, tests)
    if reason:
        return not_pushed(image, registry, reason)
    return push(image, image_id, registry, force, credentials, sbom_file)


def not_pushed(image: LockedImage, registry: str, reason: str, platform: str | None = None) -> PushResult:
    return PushResult(image=image.name, registry=registry, repository=repository_name(image), status="not pushed",
                      reason=reason, platform=platform or image.platform)


def push_index(images: list[LockedImage], registry: str, force: bool,
               credentials: registry_module.Credentials | None = None) -> PushResult:
    """One tag for every platform: the image's platform images, already in the registry, listed in a
    multi-platform index under the version tag and the aliases (docker pull picks the host's)."""
    image = images[0]
    repository = repository_name(image)
    result = PushResult(image=image.name, registry=registry, repository=repository, status="pushed",
                        platform=platforms.INDEX)
    members = {s.platform: platform_tags(s)[0][0] for s in images}
    try:
        outcome = registry_module.push_index(registry, repository, members, image.version_tag, list(image.alias_tags),
                                             image.inputs_digest, force, credentials=credentials)
    except UserError as error:
        result.status, result.reason = "failed", str(error)
        return result
    _record(result, outcome)
    return result


def _record(result: PushResult, outcome: registry_module.PushOutcome) -> None:
    """What the registry did with each tag, in the result; the first refusal is its reason."""
    result.digest = outcome.digest
    result.pushed_tags = list(outcome.pushed_tags)
    result.already_published = list(outcome.already_published)
    result.refused = [{"tag": tag, "reason": reason} for tag, reason in outcome.refused]
    if outcome.refused:
        result.status, result.reason = "refused", outcome.refused[0][1]
