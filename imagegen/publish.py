"""Publish tested images: every tag to the registry, version tags never overwritten."""

from __future__ import annotations

from pathlib import Path

from . import registry as registry_module
from . import sbom
from .errors import UserError
from .plan import ImageSpec
from .reports import PushResult, TestResult


def repository_name(spec: ImageSpec) -> str:
    """The image's name under the target registry: the last part of the matrix's repository."""
    return spec.repository.rsplit("/", 1)[-1]


def untested_reason(spec: ImageSpec, image_id: str, tests: dict[str, TestResult]) -> str | None:
    """Why this exact image may not be pushed yet, or None when its tests passed."""
    result = tests.get(spec.name)
    if result is None:
        return "no test result for this image; run `imagegen test` first or pass --skip-tests"
    if result.image_id != image_id:
        return (f"the tests ran on {result.image_id}, not on the image now tagged {spec.ref()} ({image_id}); "
                "test the rebuilt image")
    if not result.passed:
        failed = [check.name for check in result.checks if check.status == "fail"]
        return f"its tests failed ({', '.join(failed)}); version tags only go to images that passed"
    return None


def push(spec: ImageSpec, image_id: str, registry: str, force: bool,
         credentials: registry_module.Credentials | None = None, sbom_file: Path | None = None) -> PushResult:
    repository = repository_name(spec)
    result = PushResult(image=spec.name, registry=registry, repository=repository, status="pushed")
    try:
        outcome = registry_module.push_image(image_id, registry, repository, [spec.version_tag],
                                             list(spec.alias_tags), force, credentials=credentials)
    except UserError as error:
        result.status, result.reason = "failed", str(error)
        return result
    result.digest = outcome.digest
    result.pushed_tags = list(outcome.pushed_tags)
    result.already_published = list(outcome.already_published)
    result.refused = [{"tag": tag, "reason": reason} for tag, reason in outcome.refused]
    if outcome.refused:
        result.status, result.reason = "refused", outcome.refused[0][1]
    elif sbom_file and spec.version_tag in outcome.pushed_tags:  # a version published earlier has its SBOM
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


def push_if_tested(spec: ImageSpec, image_id: str, tests: dict[str, TestResult] | None, registry: str,
                   force: bool, credentials: registry_module.Credentials | None = None,
                   sbom_file: Path | None = None) -> PushResult:
    """Push the image when its tests passed on this exact image id; tests=None skips the gate."""
    reason = None if tests is None else untested_reason(spec, image_id, tests)
    if reason:
        return not_pushed(spec, registry, reason)
    return push(spec, image_id, registry, force, credentials, sbom_file)


def not_pushed(spec: ImageSpec, registry: str, reason: str) -> PushResult:
    return PushResult(image=spec.name, registry=registry, repository=repository_name(spec), status="not pushed",
                      reason=reason)
