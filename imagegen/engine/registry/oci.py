"""OCI plumbing on a registry: pushing a local image's tag through the engine, multi-platform indexes, and
artifacts that refer to an image (an SBOM), found through the referrers API or, on registries without it
(distribution 2.8), the referrers-tag fallback the OCI distribution spec defines. Blobs go up through oras-py.

Whether a tag may be written is not decided here: imagegen.stages.publish gives the verdict.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import oras.oci
import oras.provider

from imagegen.engine.registry.http import Credentials, Manifest, RegistryClient, RegistryError, check, credentials_for

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def push_tag(client: docker.DockerClient, image, remote: RegistryClient, repository: str, tag: str) -> str:
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
            check(remote.oras.upload_blob(blob, container, descriptor), f"upload of {blob}")
    manifest = {**oras.oci.NewManifest(), "artifactType": media_type, "config": config, "layers": [layer],
                "subject": {"mediaType": subject.media_type, "digest": subject_digest, "size": subject.size}}
    manifest.pop("annotations", None)
    body = json.dumps(manifest, separators=(",", ":")).encode()
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{digest}"
    put = remote.request("PUT", url, data=body, headers={"Content-Type": OCI_MANIFEST})
    check(put, f"PUT {url}")
    if put.headers.get("OCI-Subject") or _referrers_api(remote, repository, subject_digest) is not None:
        return Attached(digest, "the referrers API")
    tag = _referrers_tag(subject_digest)
    index = _referrers_index(remote, repository, subject_digest)
    descriptor = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body), "artifactType": media_type}
    index["manifests"] = [entry for entry in index["manifests"] if entry.get("digest") != digest] + [descriptor]
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{tag}"
    check(remote.request("PUT", url, data=json.dumps(index).encode(), headers={"Content-Type": OCI_INDEX}),
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
    check(response, f"GET {url}")
    return response.json()


def _referrers_tag(digest: str) -> str:
    """The OCI referrers tag schema: `<alg>-<ref>`, e.g. sha256-9f86d0..."""
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}-{value}"[:128]


def local_image(client: docker.DockerClient, image_id_or_ref: str):
    try:
        return client.images.get(image_id_or_ref)
    except docker.errors.ImageNotFound:
        raise RegistryError(f"no local image {image_id_or_ref}; build it first") from None




def platform_image(remote: RegistryClient, registry: str, repository: str, platform: str, tag: str) -> Manifest:
    """The manifest of the platform image `tag` holds; RegistryError when it holds none."""
    manifest = remote.manifest(repository, tag)
    if manifest is None or manifest.config_digest is None:
        raise RegistryError(f"{registry}/{repository}:{tag} holds no {platform} image: push each platform's image "
                            "before the index")
    return manifest


def index_entry(manifest: Manifest, platform: str) -> dict:
    """The descriptor of a platform image, for an index."""
    system, architecture = platform.split("/")
    return {"mediaType": manifest.media_type, "digest": manifest.digest, "size": manifest.size,
            "platform": {"architecture": architecture, "os": system}}


def index_body(entries: list[dict]) -> tuple[bytes, str, str]:
    """(the index as the registry stores it, its media type, its digest): a Docker manifest list when every
    member is a Docker manifest, else an OCI index."""
    media_type = DOCKER_LIST if all(entry["mediaType"] == DOCKER_MANIFEST for entry in entries) else OCI_INDEX
    body = json.dumps({"schemaVersion": 2, "mediaType": media_type, "manifests": entries},
                      separators=(",", ":")).encode()
    return body, media_type, f"sha256:{hashlib.sha256(body).hexdigest()}"


def put_manifest(remote: RegistryClient, repository: str, tag: str, body: bytes, media_type: str) -> None:
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{tag}"
    check(remote.request("PUT", url, data=body, headers={"Content-Type": media_type}), f"PUT {url}")


def member_labels(remote: RegistryClient, repository: str, manifest: Manifest) -> list[dict[str, str]]:
    """The labels of each image an index lists; of the one image, for a single image's manifest."""
    if manifest.config_digest is not None:
        return [remote.labels(repository, manifest)]
    members = json.loads(manifest.body).get("manifests", [])
    return [remote.labels(repository, remote.manifest(repository, member["digest"])) for member in members]
