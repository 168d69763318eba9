"""The push edge: docker-py pushes, the registry HTTP API v2 answers what a tag holds.

Version tags are immutable: before a version tag is pushed, the registry's manifest for it
is fetched and its config digest compared with the local image id (for an image built or
pulled locally, the image id IS its config digest, so no pull is needed). Alias tags
(`latest`, `cu12.4`) move freely.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

import docker
import docker.errors

from .containers import docker_client
from .errors import UserError
from .tags import INPUTS_LABEL

MANIFEST_MEDIA_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
HTTP_TIMEOUT_S = 30
_DOCKER_HUB_API = "registry-1.docker.io"
_BEARER_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(UserError):
    """A user-facing push or registry failure; the message is one clear line."""


@dataclass
class PushOutcome:
    digest: str | None
    pushed_tags: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    already_published: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Manifest:
    digest: str | None
    config_digest: str | None  # None for a manifest list / OCI index
    media_type: str = ""
    body: bytes = b""


@dataclass(frozen=True)
class ImageReference:
    """An image reference as Docker reads it: debian:bookworm is docker.io/library/debian:bookworm."""

    host: str  # docker.io, ghcr.io, 127.0.0.1:5000
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> "ImageReference":
        name, _, digest = ref.partition("@")
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            host, path = first, rest
        else:
            host, path = "docker.io", name
        path, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
        if host == "docker.io" and "/" not in path:
            path = f"library/{path}"
        return cls(host, path, tag or None, digest or None)


def tag_digest(ref: str) -> str:
    """The manifest (or multi-platform index) digest an image tag points to now, from the registry."""
    image = ImageReference.parse(ref)
    manifest = _fetch_manifest(image.host, image.repository, image.tag or "latest", method="HEAD")
    if manifest is None:
        raise RegistryError(f"{ref}: the registry {image.host} has no such tag")
    if not manifest.digest:
        raise RegistryError(f"{ref}: the registry {image.host} answered without a Docker-Content-Digest")
    return manifest.digest


def remote_digest(registry_host: str, repository: str, tag: str) -> str | None:
    """The manifest digest `registry_host/repository:tag` resolves to, None if absent.

    registry_host may carry a namespace (`ghcr.io/acme`), as push_image's registry may.
    """
    manifest = _fetch_manifest(registry_host, repository, tag, method="HEAD")
    return manifest.digest if manifest else None


def push_image(
    image_id_or_ref: str,
    registry: str,
    repository: str,
    version_tags: list[str],
    alias_tags: list[str],
    force: bool,
    *,
    client: docker.DockerClient | None = None,
) -> PushOutcome:
    """Push a local image under version tags (immutable unless force) and alias tags.

    registry is a host (`127.0.0.1:5000`) or a host and namespace (`ghcr.io/acme`).

    A version tag that already holds this image, or another build of the same inputs (its
    io.imagegen.inputs label equal to this image's), is "already published": nothing is pushed
    under it, and the aliases are pointed at what it holds, in the registry, so that an alias
    and its version tag never hold different bits. When a version tag is refused nothing is
    pushed, aliases included: an alias must not move to an image that did not get its version
    published.
    """
    client = client or docker_client()
    image = _local_image(client, image_id_or_ref)
    inputs = (image.labels or {}).get(INPUTS_LABEL)
    outcome = PushOutcome(digest=None)
    to_push: list[str] = []
    for tag in version_tags:
        verdict = _version_tag_verdict(registry, repository, tag, image.id, inputs, force)
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
        outcome.digest = remote_digest(registry, repository, source)
        for tag in aliases:
            _copy_tag(registry, repository, source, tag)
            outcome.pushed_tags.append(tag)
        return outcome
    for tag in to_push + aliases:
        outcome.digest = _push_tag(client, image, registry, repository, tag)
        outcome.pushed_tags.append(tag)
    return outcome


def _version_tag_verdict(registry: str, repository: str, tag: str, image_id: str, inputs: str | None,
                         force: bool) -> str:
    """'push', 'published' (this image, or one built from the same inputs, is there), or the
    reason the push is refused."""
    remote = _fetch_manifest(registry, repository, tag, method="GET")
    if remote is None:
        return "push"
    if remote.config_digest == image_id:
        return "published"
    if inputs and inputs != "none" and _remote_inputs(registry, repository, remote) == inputs:
        return "published"
    if force:
        return "push"
    held = f"config {remote.config_digest}" if remote.config_digest else "a multi-platform index"
    return (
        f"registry already holds {registry}/{repository}:{tag} with a different image ({held}); "
        "version tags are immutable; use --force to overwrite"
    )


def _remote_inputs(registry: str, repository: str, manifest: "_Manifest") -> str | None:
    """The io.imagegen.inputs label of the image a manifest describes, from its config blob."""
    if not manifest.config_digest:
        return None
    url = f"{_repository_url(registry, repository)}/blobs/{manifest.config_digest}"
    try:
        with _open(url, "GET", {}) as response:
            config = json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise RegistryError(f"GET {url}: HTTP {err.code} {err.reason}") from None
    return ((config.get("config") or {}).get("Labels") or {}).get(INPUTS_LABEL)


def _copy_tag(registry: str, repository: str, source: str, tag: str) -> None:
    """Point tag at what source holds, in the registry: its manifest put again under the new tag."""
    manifest = _fetch_manifest(registry, repository, source, method="GET")
    if manifest is None:
        raise RegistryError(f"{registry}/{repository}:{source} vanished while its aliases were moved")
    url = f"{_repository_url(registry, repository)}/manifests/{tag}"
    try:
        _open(url, "PUT", {"Content-Type": manifest.media_type}, manifest.body).close()
    except urllib.error.HTTPError as err:
        raise RegistryError(f"PUT {url}: HTTP {err.code} {err.reason}") from None


def _push_tag(client: docker.DockerClient, image, registry: str, repository: str, tag: str) -> str:
    remote_repo = f"{registry}/{repository}"
    image.tag(remote_repo, tag)
    digest = None
    try:
        stream = client.images.push(remote_repo, tag=tag, stream=True, decode=True)
        # docker-py does not raise on failures reported inside the stream: look for them.
        for chunk in stream:
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk.get("error")
                raise RegistryError(f"push of {remote_repo}:{tag} failed: {detail}")
            digest = chunk.get("aux", {}).get("Digest") or digest
    except docker.errors.APIError as err:
        raise RegistryError(f"push of {remote_repo}:{tag} failed: {err.explanation or err}") from None
    digest = digest or remote_digest(registry, repository, tag)
    if digest is None:
        raise RegistryError(f"push of {remote_repo}:{tag} reported success but the registry does not list it")
    return digest


def _local_image(client: docker.DockerClient, image_id_or_ref: str):
    try:
        return client.images.get(image_id_or_ref)
    except docker.errors.ImageNotFound:
        raise RegistryError(f"no local image {image_id_or_ref}; build it first") from None


def _repository_url(registry: str, repository: str) -> str:
    host, _, namespace = registry.partition("/")
    path = f"{namespace}/{repository}" if namespace else repository
    return f"{_base_url(host)}/v2/{path}"


def _fetch_manifest(registry: str, repository: str, reference: str, method: str) -> _Manifest | None:
    url = f"{_repository_url(registry, repository)}/manifests/{reference}"
    headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES)}
    try:
        response = _open(url, method, headers)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise RegistryError(f"{method} {url}: HTTP {err.code} {err.reason}") from None
    with response:
        body = response.read() if method == "GET" else b""
        digest = response.headers.get("Docker-Content-Digest")
        media_type = response.headers.get("Content-Type", "")
    config_digest = json.loads(body).get("config", {}).get("digest") if body else None
    return _Manifest(digest=digest, config_digest=config_digest, media_type=media_type, body=body)


def _open(url: str, method: str, headers: dict[str, str], data: bytes | None = None):
    """Open url; on a Bearer challenge fetch an anonymous token once and retry."""
    try:
        return _request(url, method, headers, data)
    except urllib.error.HTTPError as err:
        challenge = err.headers.get("WWW-Authenticate", "") if err.code == 401 else ""
        if not challenge.lower().startswith("bearer "):
            raise
        token = _anonymous_token(challenge)
        return _request(url, method, {**headers, "Authorization": f"Bearer {token}"}, data)


def _request(url: str, method: str, headers: dict[str, str], data: bytes | None = None):
    request = urllib.request.Request(url, method=method, headers=headers, data=data)
    try:
        return urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
    except urllib.error.HTTPError:
        raise  # an answer from the registry: callers decide (404, 401 challenge)
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise RegistryError(f"cannot reach registry at {url}: {reason}") from None


def _anonymous_token(challenge: str) -> str:
    params = dict(_BEARER_PARAM.findall(challenge))
    realm = params.pop("realm", None)
    if not realm:
        raise RegistryError(f"registry asked for a token without a realm: {challenge}")
    url = f"{realm}?{urllib.parse.urlencode(params)}"
    try:
        with _request(url, "GET", {}) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise RegistryError(
            f"registry refused an anonymous token ({url}: HTTP {err.code}); "
            "log in with docker login or use a public repository"
        ) from None
    token = answer.get("token") or answer.get("access_token")
    if not token:
        raise RegistryError(f"token endpoint {realm} answered without a token")
    return token


def _base_url(registry: str) -> str:
    host = _DOCKER_HUB_API if registry in ("docker.io", "index.docker.io") else registry
    scheme = "http" if _is_loopback(host) else "https"
    return f"{scheme}://{host}"


def _is_loopback(registry: str) -> bool:
    # Docker itself only talks plain HTTP to loopback registries by default; match it.
    hostname = urllib.parse.urlsplit(f"//{registry}").hostname or ""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
