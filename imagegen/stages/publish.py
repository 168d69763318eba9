"""Publish tested images: every tag to the registry, version tags never overwritten.

The publication verdict lives here. A version tag is immutable: before it is pushed, the registry's manifest
for it is fetched and its config digest compared with the local image id (for an image built or pulled
locally, the image id IS its config digest, so no pull is needed), and else the io.imagegen.inputs label of
its config with the local image's: another build of the same inputs is "already published". Alias tags
(`latest`, `cu12.4`) move freely, and only to what a version tag holds.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import docker

from imagegen.core import platforms
from imagegen.core.errors import UserError
from imagegen.engine.containers import docker_client
from imagegen.engine.registry import oci, skopeo, uncompressed
from imagegen.engine.registry.http import Credentials, RegistryClient, RegistryError, credentials_for
from imagegen.render.locked import LockedImage
from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages import provenance, sbom, signing
from imagegen.stages.results import PushResult, TestResult


@dataclass
class PushOutcome:
    digest: str | None
    pushed_tags: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    already_published: list[str] = field(default_factory=list)


def push_image(image_id_or_ref: str, registry: str, repository: str, version_tags: list[str], alias_tags: list[str],
               force: bool, *, client: docker.DockerClient | None = None,
               credentials: Credentials | None = None, compression: str = "gzip") -> PushOutcome:
    """Push a local image under version tags (immutable unless force) and alias tags.

    registry is a host (`127.0.0.1:5000`) or a host and namespace (`ghcr.io/acme`). A version tag that already
    holds this image, or another build of the same inputs, is "already published": nothing is pushed under
    it, and the aliases are pointed at what it holds, in the registry, so that an alias and its version tag
    never hold different bits. When a version tag is refused nothing is pushed, aliases included: an alias
    must not move to an image that did not get its version published.
    """
    if compression == "zstd":
        skopeo.require_skopeo()
    client = client or docker_client()
    image = oci.local_image(client, image_id_or_ref)
    inputs = (image.labels or {}).get(INPUTS_LABEL)
    remote = RegistryClient(registry, credentials_for(registry, credentials))
    outcome = PushOutcome(digest=None)
    to_push: list[str] = []
    for tag in version_tags:
        verdict = _version_tag_verdict(remote, registry, repository, tag, image.id, inputs, force)
        if verdict == "push":
            to_push.append(tag)
        elif verdict == "published":
            outcome.already_published.append(tag)
        else:
            outcome.refused.append((tag, verdict))
    if outcome.refused:
        return outcome
    aliases = [tag for tag in alias_tags if tag not in to_push]
    if outcome.already_published and not to_push:
        source = outcome.already_published[0]
        outcome.digest = remote.manifest(repository, source, "HEAD").digest
        return _move_aliases(remote, repository, source, aliases, outcome)
    for tag in to_push + aliases:
        if compression != "gzip" and outcome.pushed_tags:  # the layers are up: the other tags point at them
            remote.copy_tag(repository, outcome.pushed_tags[0], tag)
        elif compression == "zstd":
            outcome.digest = skopeo.copy_as_zstd(image.id, remote, repository, tag)
        elif compression == "none":
            outcome.digest = uncompressed.push_tag(client, image, remote, repository, tag).digest
        else:
            outcome.digest = oci.push_tag(client, image, remote, repository, tag)
        outcome.pushed_tags.append(tag)
    return outcome


def _move_aliases(remote: RegistryClient, repository: str, source: str, aliases: list[str],
                  outcome: PushOutcome) -> PushOutcome:
    for tag in aliases:
        remote.copy_tag(repository, source, tag)
        outcome.pushed_tags.append(tag)
    return outcome


def _version_tag_verdict(client: RegistryClient, registry: str, repository: str, tag: str, image_id: str,
                         inputs: str | None, force: bool) -> str:
    """'push', 'published' (this image, or one built from the same inputs, is there), or the
    reason the push is refused."""
    remote = client.manifest(repository, tag)
    if remote is None:
        return "push"
    if remote.config_digest == image_id:
        return "published"
    if inputs and inputs != "none" and client.labels(repository, remote).get(INPUTS_LABEL) == inputs:
        return "published"
    if force:
        return "push"
    held = f"config {remote.config_digest}" if remote.config_digest else "a multi-platform index"
    return (f"registry already holds {registry}/{repository}:{tag} with a different image ({held}); "
            "version tags are immutable; use --force to overwrite")


def put_index(registry: str, repository: str, members: dict[str, str], version_tag: str, alias_tags: list[str],
              inputs: str | None, force: bool, *, credentials: Credentials | None = None) -> PushOutcome:
    """Put a multi-platform index of the platform images under `members` (platform -> tag, already pushed,
    each of `inputs`) under the version tag (immutable unless force) and the aliases.

    The version tag is "already published" when it holds this very index, or an index of images of the same
    inputs; then the aliases are pointed at what it holds.
    """
    remote = RegistryClient(registry, credentials_for(registry, credentials))
    entries = []
    for platform, tag in sorted(members.items()):
        manifest = oci.platform_image(remote, registry, repository, platform, tag)
        entries.append(oci.index_entry(manifest, platform))
        held = remote.labels(repository, manifest).get(INPUTS_LABEL)
        if inputs and held != inputs:
            raise RegistryError(f"{registry}/{repository}:{tag} holds an image of other inputs ({held}), not {inputs}")
    body, media_type, digest = oci.index_body(entries)
    outcome = PushOutcome(digest=digest)
    held = remote.manifest(repository, version_tag)
    if held is not None and (held.digest == digest or _index_of_inputs(remote, repository, held, inputs)):
        outcome.already_published.append(version_tag)
        outcome.digest = held.digest
        return _move_aliases(remote, repository, version_tag, alias_tags, outcome)
    if held is not None and not force:
        outcome.refused.append((version_tag, f"registry already holds {registry}/{repository}:{version_tag} with "
                                             "other images; version tags are immutable; use --force to overwrite"))
        return outcome
    for tag in [version_tag, *alias_tags]:
        oci.put_manifest(remote, repository, tag, body, media_type)
        outcome.pushed_tags.append(tag)
    return outcome


def _index_of_inputs(remote: RegistryClient, repository: str, held, inputs: str | None) -> bool:
    """The tag holds an index (not a single image) whose every image was built from `inputs`."""
    if held.config_digest is not None:
        return False
    return {labels.get(INPUTS_LABEL) for labels in oci.member_labels(remote, repository, held)} == {inputs}


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
         credentials: Credentials | None = None, sbom_file: Path | None = None,
         compression: str = "gzip", sign_key: Path | None = None) -> PushResult:
    repository = repository_name(image)
    result = PushResult(image=image.name, registry=registry, repository=repository, status="pushed",
                        platform=image.platform, compression=compression)
    version_tags, alias_tags = platform_tags(image)
    try:
        outcome = push_image(image_id, registry, repository, version_tags, alias_tags, force,
                             credentials=credentials, compression=compression)
    except UserError as error:
        result.status, result.reason = "failed", str(error)
        return result
    _record(result, outcome)
    if not outcome.refused and version_tags[0] in outcome.pushed_tags:  # a version published earlier has them
        if sbom_file:
            _attach_sbom(result, sbom_file, credentials)
        _attach_provenance(result, image, image_id, credentials)
        if sign_key:
            _sign(result, sign_key, credentials)
    return result


def _sign(result: PushResult, sign_key: Path, credentials: Credentials | None) -> None:
    """The image's digest and its provenance's, each signed under its .sig tag."""
    key = signing.private_key(sign_key)
    remote = RegistryClient(result.registry, credentials_for(result.registry, credentials))
    name = f"{result.registry}/{result.repository}"
    try:
        result.signatures = [signing.attach(remote, result.repository, name, digest, key)
                             for digest in (result.digest, result.provenance_digest) if digest]
    except UserError as error:
        result.signature_error = str(error)


def _attach_provenance(result: PushResult, image: LockedImage, image_id: str, credentials: Credentials | None) -> None:
    try:
        labels = docker_client().images.get(image_id).labels or {}
    except docker.errors.DockerException as error:  # pushed from the engine a moment ago: it went meanwhile
        result.provenance_error = f"the image's labels could not be read: {error}"
        return
    said = provenance.statement(image, f"{result.registry}/{result.repository}", result.digest, labels)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "provenance.intoto.json"
        path.write_text(json.dumps(said, indent=1, sort_keys=True))
        attached, result.provenance_error = _attached(result, path, provenance.MEDIA_TYPE, credentials)
    if attached:
        result.provenance_digest = attached.digest


def _attach_sbom(result: PushResult, sbom_file: Path, credentials: Credentials | None) -> None:
    attached, result.sbom_error = _attached(result, sbom_file, sbom.MEDIA_TYPE, credentials)
    if attached:
        result.sbom_digest, result.sbom_found_by = attached.digest, attached.found_by


def _attached(result: PushResult, path: Path, media_type: str,
              credentials: Credentials | None) -> tuple[oci.Attached | None, str]:
    """`path` attached to the pushed image as an artifact of `media_type`; else None and why."""
    try:
        return oci.attach_artifact(result.registry, result.repository, result.digest, path, media_type,
                                   credentials), ""
    except UserError as error:
        return None, str(error)


def push_if_tested(image: LockedImage, image_id: str, tests: dict[str, TestResult] | None, registry: str,
                   force: bool, credentials: Credentials | None = None,
                   sbom_file: Path | None = None, compression: str = "gzip",
                   sign_key: Path | None = None) -> PushResult:
    """Push the image when its tests passed on this exact image id; tests=None skips the gate."""
    reason = None if tests is None else untested_reason(image, image_id, tests)
    if reason:
        return not_pushed(image, registry, reason)
    return push(image, image_id, registry, force, credentials, sbom_file, compression, sign_key)


def not_pushed(image: LockedImage, registry: str, reason: str, platform: str | None = None) -> PushResult:
    return PushResult(image=image.name, registry=registry, repository=repository_name(image), status="not pushed",
                      reason=reason, platform=platform or image.platform)


def push_index(images: list[LockedImage], registry: str, force: bool,
               credentials: Credentials | None = None) -> PushResult:
    """One tag for every platform: the image's platform images, already in the registry, listed in a
    multi-platform index under the version tag and the aliases (docker pull picks the host's)."""
    image = images[0]
    repository = repository_name(image)
    result = PushResult(image=image.name, registry=registry, repository=repository, status="pushed",
                        platform=platforms.INDEX)
    members = {s.platform: platform_tags(s)[0][0] for s in images}
    try:
        outcome = put_index(registry, repository, members, image.version_tag, list(image.alias_tags),
                                             image.inputs_digest, force, credentials=credentials)
    except UserError as error:
        result.status, result.reason = "failed", str(error)
        return result
    _record(result, outcome)
    return result


def _record(result: PushResult, outcome: PushOutcome) -> None:
    """What the registry did with each tag, in the result; the first refusal is its reason."""
    result.digest = outcome.digest
    result.pushed_tags = list(outcome.pushed_tags)
    result.already_published = list(outcome.already_published)
    result.refused = [{"tag": tag, "reason": reason} for tag, reason in outcome.refused]
    if outcome.refused:
        result.status, result.reason = "refused", outcome.refused[0][1]
