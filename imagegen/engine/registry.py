"""The push edge: docker-py pushes, the registry HTTP API v2 answers what a tag holds.

Version tags are immutable: before a version tag is pushed, the registry's manifest for it
is fetched and its config digest compared with the local image id (for an image built or
pulled locally, the image id IS its config digest, so no pull is needed), and else the
io.imagegen.inputs label of its config with the local image's: another build of the same
inputs is already published. Alias tags (`latest`, `cu12.4`) move freely.

Credentials come from --registry-user/--registry-password-stdin, else from the user's docker
config and its credential helpers, resolved by docker-py; the same credentials serve the
tag check (oras-py's registry client) and the push (the engine). Requests that meet 429 or
5xx are retried with exponential backoff.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.auth
import docker.errors
import oras.container
import oras.oci
import oras.provider
import requests
import requests.adapters
import urllib3.util.retry

from imagegen.engine.containers import docker_client
from imagegen.core.errors import UserError
from imagegen.render.tags import INPUTS_LABEL

MANIFEST_MEDIA_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
)
HTTP_TIMEOUT_S = 30
RETRIES = 5  # after 0.5, 1, 2, 4 and 8 s, or as long as a Retry-After header asks
RETRY_STATUSES = (429, 500, 502, 503, 504)
_DOCKER_HUB_API = "registry-1.docker.io"


class RegistryError(UserError):
    """A user-facing push or registry failure; the message is one clear line."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)


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
    media_type: str | None = None
    size: int | None = None
    body: bytes = b""  # as the registry holds it (GET only)


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


def credentials_for(registry: str, given: Credentials | None = None) -> Credentials | None:
    """`given`, else what `docker login` stored for the registry's host (config or credential helper)."""
    if given is not None:
        return given
    host = registry.partition("/")[0]
    try:
        found = docker.auth.resolve_authconfig(docker.auth.load_config(), host) or {}
    except docker.errors.DockerException as error:
        raise RegistryError(f"cannot read the docker credentials for {host}: {error}") from None
    username = found.get("username") or found.get("Username")
    password = found.get("password") or found.get("Password")
    return Credentials(username, password) if username and password else None


class RegistryClient:
    """One registry host, spoken to through oras-py with retries and the user's credentials."""

    def __init__(self, registry: str, credentials: Credentials | None = None):
        self.host, _, self.namespace = registry.partition("/")
        self.api_host = _DOCKER_HUB_API if self.host in ("docker.io", "index.docker.io") else self.host
        self.credentials = credentials
        scheme = self._challenge_scheme()
        # oras-py's token backend speaks Bearer (GHCR, Docker Hub); htpasswd registries ask for Basic.
        self.oras = oras.provider.Registry(hostname=self.api_host, insecure=_is_loopback(self.api_host),
                                           auth_backend="basic" if scheme == "basic" else "token")
        _retrying(self.oras.session)
        if credentials:
            self.oras.auth.set_basic_auth(credentials.username, credentials.password)
        elif scheme == "basic":
            raise RegistryError(self._login_hint("asks for a user name and password"))

    @property
    def base_url(self) -> str:
        return f"{self.oras.prefix}://{self.api_host}"

    def path(self, repository: str) -> str:
        return f"{self.namespace}/{repository}" if self.namespace else repository

    def container(self, repository: str, reference: str) -> oras.container.Container:
        return oras.container.Container(f"{self.path(repository)}:{reference}", registry=self.api_host)

    def request(self, method: str, url: str, **kwargs) -> requests.Response:
        """A request with oras-py's authentication; 401/403 become one line saying how to log in."""
        try:
            response = self.oras.do_request(url, method, **kwargs)
        except ValueError:  # oras-py: "Cannot respond to request for authentication"
            raise RegistryError(self._login_hint(f"refused {method} {url}")) from None
        except requests.RequestException as error:
            raise RegistryError(f"cannot reach registry at {url}: {_reason(error)}") from None
        if response.status_code in (401, 403):
            raise RegistryError(self._login_hint(f"answered {method} {url} with HTTP {response.status_code}"))
        return response

    def manifest(self, repository: str, reference: str, method: str = "GET") -> _Manifest | None:
        url = f"{self.base_url}/v2/{self.path(repository)}/manifests/{reference}"
        response = self.request(method, url, headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"{method} {url}: HTTP {response.status_code} {response.reason}")
        body = response.json() if method == "GET" else {}
        size = len(response.content) if method == "GET" else response.headers.get("Content-Length")
        return _Manifest(digest=response.headers.get("Docker-Content-Digest"),
                         config_digest=body.get("config", {}).get("digest"),
                         media_type=response.headers.get("Content-Type", "").split(";")[0] or None,
                         size=int(size) if size else None, body=response.content if method == "GET" else b"")

    def labels(self, repository: str, manifest: _Manifest) -> dict[str, str]:
        """The labels of the image a manifest describes, from its config blob."""
        if not manifest.config_digest:
            return {}
        url = f"{self.base_url}/v2/{self.path(repository)}/blobs/{manifest.config_digest}"
        response = self.request("GET", url)
        _check(response, f"GET {url}")
        return (response.json().get("config") or {}).get("Labels") or {}

    def copy_tag(self, repository: str, source: str, tag: str) -> None:
        """Point tag at what source holds, in the registry: its manifest put again under the new tag."""
        manifest = self.manifest(repository, source)
        if manifest is None:
            raise RegistryError(f"{self.host}/{self.path(repository)}:{source} vanished while its aliases moved")
        url = f"{self.base_url}/v2/{self.path(repository)}/manifests/{tag}"
        _check(self.request("PUT", url, data=manifest.body, headers={"Content-Type": manifest.media_type}),
               f"PUT {url}")

    def _challenge_scheme(self) -> str | None:
        """How the registry asks to authenticate ("basic", "bearer"), None when it does not."""
        url = f"{'http' if _is_loopback(self.api_host) else 'https'}://{self.api_host}/v2/"
        session = _retrying(requests.Session())
        try:
            response = session.get(url, timeout=HTTP_TIMEOUT_S)
        except requests.RequestException as error:
            raise RegistryError(f"cannot reach registry at {url}: {_reason(error)}") from None
        if response.status_code != 401:
            return None
        return response.headers.get("WWW-Authenticate", "").split(" ", 1)[0].lower() or None

    def _login_hint(self, what: str) -> str:
        if self.credentials:
            return (f"registry {self.host} {what} with the credentials of {self.credentials.username}; "
                    f"check them with `docker login {self.host}`")
        return (f"registry {self.host} {what}: it needs credentials; log in with `docker login {self.host}`, "
                "or pass --registry-user USER --registry-password-stdin")


def _retrying(session: requests.Session) -> requests.Session:
    # A refused connection is retried twice only: it is a wrong address more often than a blip.
    retry = urllib3.util.retry.Retry(total=RETRIES, connect=2, backoff_factor=0.5, status_forcelist=RETRY_STATUSES,
                                     allowed_methods=None, respect_retry_after_header=True, raise_on_status=False)
    adapter = requests.adapters.HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _reason(error: requests.RequestException) -> str:
    """The innermost reason urllib3 gives, without the object repr it starts with."""
    reason = error.args[0] if error.args else error
    return str(getattr(reason, "reason", reason)).split(">: ", 1)[-1]


def tag_digest(ref: str) -> str:
    """The manifest (or multi-platform index) digest an image tag points to now, from the registry."""
    image = ImageReference.parse(ref)
    manifest = RegistryClient(image.host, credentials_for(image.host)).manifest(image.repository,
                                                                                image.tag or "latest", "HEAD")
    if manifest is None:
        raise RegistryError(f"{ref}: the registry {image.host} has no such tag")
    if not manifest.digest:
        raise RegistryError(f"{ref}: the registry {image.host} answered without a Docker-Content-Digest")
    return manifest.digest


def remote_digest(registry: str, repository: str, tag: str, credentials: Credentials | None = None) -> str | None:
    """The manifest digest `registry/repository:tag` resolves to, None if absent.

    registry may carry a namespace (`ghcr.io/acme`), as push_image's registry may.
    """
    manifest = RegistryClient(registry, credentials_for(registry, credentials)).manifest(repository, tag, "HEAD")
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
    credentials: Credentials | None = None,
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
    credentials = credentials_for(registry, credentials)
    remote = RegistryClient(registry, credentials)
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
        for tag in aliases:
            remote.copy_tag(repository, source, tag)
            outcome.pushed_tags.append(tag)
        return outcome
    for tag in to_push + aliases:
        outcome.digest = _push_tag(client, image, remote, repository, tag)
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
    return (
        f"registry already holds {registry}/{repository}:{tag} with a different image ({held}); "
        "version tags are immutable; use --force to overwrite"
    )


def _push_tag(client: docker.DockerClient, image, remote: RegistryClient, repository: str, tag: str) -> str:
    remote_repo = f"{remote.host}/{remote.path(repository)}"
    image.tag(remote_repo, tag)
    digest = None
    auth = {"username": remote.credentials.username, "password": remote.credentials.password} \
        if remote.credentials else None
    try:
        stream = client.images.push(remote_repo, tag=tag, stream=True, decode=True, auth_config=auth)
        # docker-py does not raise on failures reported inside the stream: look for them.
        for chunk in stream:
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk.get("error")
                raise RegistryError(f"push of {remote_repo}:{tag} failed: {detail}")
            digest = chunk.get("aux", {}).get("Digest") or digest
    except docker.errors.APIError as err:
        raise RegistryError(f"push of {remote_repo}:{tag} failed: {err.explanation or err}") from None
    if digest is None:
        found = remote.manifest(repository, tag, "HEAD")
        digest = found.digest if found else None
    if digest is None:
        raise RegistryError(f"push of {remote_repo}:{tag} reported success but the registry does not list it")
    return digest


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def push_index(registry: str, repository: str, members: dict[str, str], version_tag: str, alias_tags: list[str],
               inputs: str | None, force: bool, *, credentials: Credentials | None = None) -> PushOutcome:
    """Put a multi-platform index of the platform images under `members` (platform -> tag, already
    pushed) under the version tag (immutable unless force) and the aliases.

    The version tag is "already published" when it holds this very index, or an index of images of
    the same inputs; then the aliases are pointed at what it holds.
    """
    remote = RegistryClient(registry, credentials_for(registry, credentials))
    entries = [_index_entry(remote, registry, repository, platform, tag, inputs)
               for platform, tag in sorted(members.items())]
    media_type = DOCKER_LIST if all(entry["mediaType"] == DOCKER_MANIFEST for entry in entries) else OCI_INDEX
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries},
                      separators=(",", ":")).encode()
    outcome = PushOutcome(digest=f"sha256:{hashlib.sha256(body).hexdigest()}")
    held = remote.manifest(repository, version_tag)
    if held is not None and (held.digest == outcome.digest or _index_inputs(remote, repository, held) == {inputs}):
        outcome.already_published.append(version_tag)
        outcome.digest = held.digest
        for tag in alias_tags:
            remote.copy_tag(repository, version_tag, tag)
            outcome.pushed_tags.append(tag)
        return outcome
    if held is not None and not force:
        outcome.refused.append((version_tag, f"registry already holds {registry}/{repository}:{version_tag} with "
                                             "other images; version tags are immutable; use --force to overwrite"))
        return outcome
    for tag in [version_tag, *alias_tags]:
        url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{tag}"
        _check(remote.request("PUT", url, data=body, headers={"Content-Type": media_type}), f"PUT {url}")
        outcome.pushed_tags.append(tag)
    return outcome


def _index_entry(remote: RegistryClient, registry: str, repository: str, platform: str, tag: str,
                 inputs: str | None) -> dict:
    manifest = remote.manifest(repository, tag)
    if manifest is None or manifest.config_digest is None:
        raise RegistryError(f"{registry}/{repository}:{tag} holds no {platform} image: push each platform's image "
                            "before the index")
    held = remote.labels(repository, manifest).get(INPUTS_LABEL)
    if inputs and held != inputs:
        raise RegistryError(f"{registry}/{repository}:{tag} holds an image of other inputs ({held}), not {inputs}")
    system, architecture = platform.split("/")
    return {"mediaType": manifest.media_type, "digest": manifest.digest, "size": manifest.size,
            "platform": {"architecture": architecture, "os": system}}


def _index_inputs(remote: RegistryClient, repository: str, manifest: _Manifest) -> set[str | None]:
    """The inputs labels of the images an index lists; {None} for a single image."""
    if manifest.config_digest is not None:
        return {None}
    members = json.loads(manifest.body).get("manifests", [])
    return {remote.labels(repository, remote.manifest(repository, member["digest"])).get(INPUTS_LABEL)
            for member in members}
OCI_EMPTY = "application/vnd.oci.empty.v1+json"


@dataclass(frozen=True)
class Attached:
    digest: str  # of the artifact's manifest
    found_by: str  # how a client finds it: "the referrers API" or "the referrers tag sha256-..."


def attach_artifact(registry: str, repository: str, subject_digest: str, path: Path, media_type: str,
                    credentials: Credentials | None = None) -> Attached:
    """Push `path` as an OCI artifact whose `subject` is the manifest `subject_digest`.

    Registries with the OCI 1.1 referrers API index it themselves. Older ones (distribution
    2.8 stores the manifest but has no such API) get the fallback the OCI spec defines: an
    index under the tag `sha256-<hex>` that lists every artifact referring to that digest.
    """
    remote = RegistryClient(registry, credentials_for(registry, credentials))
    subject = remote.manifest(repository, subject_digest)
    if subject is None:
        raise RegistryError(f"{registry}/{repository}@{subject_digest}: no such manifest to attach {path.name} to")
    container = remote.container(repository, _referrers_tag(subject_digest))  # blobs only: any valid tag
    layer = oras.oci.NewLayer(str(path), media_type=media_type)
    layer["annotations"] = {"org.opencontainers.image.title": path.name}
    config, _ = oras.oci.ManifestConfig(None, OCI_EMPTY)
    with oras.provider.temporary_empty_config() as empty:
        for blob, descriptor in ((str(path), layer), (empty, config)):
            _check(remote.oras.upload_blob(blob, container, descriptor), f"upload of {blob}")
    manifest = {**oras.oci.NewManifest(), "artifactType": media_type, "config": config, "layers": [layer],
                "subject": {"mediaType": subject.media_type, "digest": subject_digest, "size": subject.size}}
    manifest.pop("annotations", None)
    body = json.dumps(manifest, separators=(",", ":")).encode()
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{digest}"
    put = remote.request("PUT", url, data=body, headers={"Content-Type": OCI_MANIFEST})
    _check(put, f"PUT {url}")
    if put.headers.get("OCI-Subject") or _referrers_api(remote, repository, subject_digest) is not None:
        return Attached(digest, "the referrers API")
    tag = _referrers_tag(subject_digest)
    index = _referrers_index(remote, repository, subject_digest)
    descriptor = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body), "artifactType": media_type}
    index["manifests"] = [entry for entry in index["manifests"] if entry.get("digest") != digest] + [descriptor]
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{tag}"
    _check(remote.request("PUT", url, data=json.dumps(index).encode(), headers={"Content-Type": OCI_INDEX}),
           f"PUT {url}")
    return Attached(digest, f"the referrers tag {tag}")


def referrers(registry: str, repository: str, subject_digest: str,
              credentials: Credentials | None = None) -> list[dict]:
    """Descriptors of the artifacts that refer to `subject_digest`: the referrers API, else the tag."""
    remote = RegistryClient(registry, credentials_for(registry, credentials))
    found = _referrers_api(remote, repository, subject_digest)
    return found if found is not None else _referrers_index(remote, repository, subject_digest)["manifests"]


def _referrers_api(remote: RegistryClient, repository: str, subject_digest: str) -> list[dict] | None:
    url = f"{remote.base_url}/v2/{remote.path(repository)}/referrers/{subject_digest}"
    response = remote.request("GET", url, headers={"Accept": OCI_INDEX})
    if response.status_code != 200 or not response.headers.get("Content-Type", "").startswith(OCI_INDEX):
        return None  # distribution 2.8 answers 404 "page not found"
    return response.json().get("manifests", [])


def _referrers_index(remote: RegistryClient, repository: str, subject_digest: str) -> dict:
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{_referrers_tag(subject_digest)}"
    response = remote.request("GET", url, headers={"Accept": OCI_INDEX})
    if response.status_code == 404:
        return {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    _check(response, f"GET {url}")
    return response.json()


def _referrers_tag(digest: str) -> str:
    """The OCI referrers tag schema: `<alg>-<ref>`, e.g. sha256-9f86d0..."""
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}-{value}"[:128]


def _check(response: requests.Response, what: str) -> None:
    if response.status_code >= 300:
        raise RegistryError(f"{what}: HTTP {response.status_code} {response.text.strip()[:300]}")


def _local_image(client: docker.DockerClient, image_id_or_ref: str):
    try:
        return client.images.get(image_id_or_ref)
    except docker.errors.ImageNotFound:
        raise RegistryError(f"no local image {image_id_or_ref}; build it first") from None


def _is_loopback(registry: str) -> bool:
    # Docker itself only talks plain HTTP to loopback registries by default; match it.
    hostname = urllib.parse.urlsplit(f"//{registry}").hostname or ""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
