"""The registry's HTTP API v2 edge: credentials, one client per registry host (oras-py's session and auth,
with retries), manifests and labels, tag digests.

Credentials come from --registry-user/--registry-password-stdin, else from the user's docker config and its
credential helpers, resolved by docker-py; the same credentials serve every request here and the engine's
push. Requests that meet 429 or 5xx are retried with exponential backoff.

It imports nothing of imagegen but core: what a tag's contents mean for publication is imagegen.stages.publish's.
"""

from __future__ import annotations

import json

import ipaddress
import urllib.parse
from dataclasses import dataclass, field

import docker.auth
import docker.errors
import oras.container
import oras.provider
import requests
import requests.adapters
import urllib3.util.retry

from imagegen.core.errors import UserError
from imagegen.engine.registry import registry_problem

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


class RegistryUnreachable(RegistryError):
    """No answer at all (a name that does not resolve, a refused or timed-out connection): not a refusal."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Manifest:
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
        problem = registry_problem(registry)
        if problem:
            raise RegistryError(problem)
        self.host, _, self.namespace = registry.partition("/")
        self.api_host = _DOCKER_HUB_API if self.host in ("docker.io", "index.docker.io") else self.host
        self.credentials = credentials
        scheme = self._challenge_scheme()
        # oras-py's token backend speaks Bearer (GHCR, Docker Hub); htpasswd registries ask for Basic.
        self.oras = oras.provider.Registry(hostname=self.api_host, insecure=is_loopback(self.api_host),
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
            raise RegistryUnreachable(f"cannot reach registry at {url}: {_reason(error)}") from None
        if response.status_code in (401, 403):
            raise RegistryError(self._login_hint(f"answered {method} {url} with HTTP {response.status_code}"))
        return response

    def manifest(self, repository: str, reference: str, method: str = "GET") -> Manifest | None:
        url = f"{self.base_url}/v2/{self.path(repository)}/manifests/{reference}"
        response = self.request(method, url, headers={"Accept": ", ".join(MANIFEST_MEDIA_TYPES)})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"{method} {url}: HTTP {response.status_code} {response.reason}")
        body = response.json() if method == "GET" else {}
        size = len(response.content) if method == "GET" else response.headers.get("Content-Length")
        return Manifest(digest=response.headers.get("Docker-Content-Digest"),
                         config_digest=body.get("config", {}).get("digest"),
                         media_type=response.headers.get("Content-Type", "").split(";")[0] or None,
                         size=int(size) if size else None, body=response.content if method == "GET" else b"")

    def blob(self, repository: str, digest: str) -> bytes:
        url = f"{self.base_url}/v2/{self.path(repository)}/blobs/{digest}"
        response = self.request("GET", url)
        check(response, f"GET {url}")
        return response.content

    def labels(self, repository: str, manifest: Manifest) -> dict[str, str]:
        """The labels of the image a manifest describes, from its config blob."""
        if not manifest.config_digest:
            return {}
        return (json.loads(self.blob(repository, manifest.config_digest)).get("config") or {}).get("Labels") or {}

    def copy_tag(self, repository: str, source: str, tag: str) -> None:
        """Point tag at what source holds, in the registry: its manifest put again under the new tag."""
        manifest = self.manifest(repository, source)
        if manifest is None:
            raise RegistryError(f"{self.host}/{self.path(repository)}:{source} vanished while its aliases moved")
        url = f"{self.base_url}/v2/{self.path(repository)}/manifests/{tag}"
        check(self.request("PUT", url, data=manifest.body, headers={"Content-Type": manifest.media_type}),
               f"PUT {url}")

    def _challenge_scheme(self) -> str | None:
        """How the registry asks to authenticate ("basic", "bearer"), None when it does not."""
        url = f"{'http' if is_loopback(self.api_host) else 'https'}://{self.api_host}/v2/"
        session = _retrying(requests.Session())
        try:
            response = session.get(url, timeout=HTTP_TIMEOUT_S)
        except requests.RequestException as error:
            raise RegistryUnreachable(f"cannot reach registry at {url}: {_reason(error)}") from None
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


def check(response: requests.Response, what: str) -> None:
    if response.status_code >= 300:
        raise RegistryError(f"{what}: HTTP {response.status_code} {response.text.strip()[:300]}")


def is_loopback(registry: str) -> bool:
    # Docker itself only talks plain HTTP to loopback registries by default; match it.
    hostname = urllib.parse.urlsplit(f"//{registry}").hostname or ""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
