"""Pushing a local image with uncompressed layers: each layer as the engine saves it (`docker save`), not
recompressed, under Docker's media type for an uncompressed layer, which Docker (20.10 included), containerd,
podman and CRI-O pull. Where the registry is near (a mirror in the cluster's datacenter) a pull is bound by
gunzip, not by the network, and Docker's overlay2 store pulls such layers in less time than gzip's (bench sections
14 and 16 measure it on Docker 20.10 and 26; docs/user-guide.md says which compression for which engine). Over the
internet gzip stays the better choice: about twice the bytes travel.

The layers are read once, as `docker save` streams them. The bytes of an uncompressed layer are its diff_id, so
a layer the registry holds is not uploaded again. The engine streams layers in an order that does not say which
is which (Docker 20.10 names them by a legacy id), so a layer whose size is that of a blob the registry holds
under one of the image's diff_ids is read and hashed without upload; in the rare case that it turns out to be
another layer of the same size, the stream is read again and every layer uploaded.

The containerd image store (Docker 26 with it on, 29's default) saves another shape: an OCI layout whose image id
is its manifest's digest, not its config's, and whose layers are the compressed blobs BuildKit exported. There the
config is the blob whose rootfs lists the image's diff_ids, and each gzip layer is decompressed as it streams, its
digest known only once it is read: it is uploaded (a registry keeps one copy of a digest however often it is sent).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import queue
import tarfile
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Iterator

import docker

from imagegen.engine.registry.http import RegistryClient, RegistryError, check

MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.docker.image.rootfs.diff.tar"
CHUNK_BYTES = 64 * 1024 * 1024  # one PATCH of a chunked upload; the spec's chunked upload, which every registry takes
READ_BYTES = 4 * 1024 * 1024  # of `docker save`'s stream at a time
READ_AHEAD_CHUNKS = 2  # read while the chunk before is sent: at most this many more CHUNK_BYTES held in memory
CONFIG_MAX_BYTES = 4 * 1024 * 1024  # a blob this small may be the config (an image config is kilobytes)
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Pushed:
    digest: str  # of the manifest
    uploaded: list[str] = field(default_factory=list)  # the layer digests sent up, in the order they were
    held: list[str] = field(default_factory=list)  # those the registry had already


class _SizeTwin(Exception):
    """A layer had the size of a held blob but other bytes: read the stream again, uploading every layer."""


def push_tag(client: docker.DockerClient, image, remote: RegistryClient, repository: str, tag: str) -> Pushed:
    """Push the engine's image under REGISTRY/REPOSITORY:TAG with uncompressed layers; the config is the image's
    own (on Docker's own store its digest is the local image id)."""
    diff_ids = list(image.attrs["RootFS"]["Layers"])
    held = {digest: size for digest in set(diff_ids)
            if (size := _blob_size(remote, repository, digest)) is not None}
    try:
        pushed, layers, config = _stream(client, image, remote, repository, diff_ids, held)
    except _SizeTwin:
        pushed, layers, config = _stream(client, image, remote, repository, diff_ids, {})
    if config is None:
        raise RegistryError(f"the engine's saved {image.id} held no config: cannot push it uncompressed")
    missing = [digest for digest in diff_ids if digest not in layers]
    if missing:
        raise RegistryError(f"the engine's saved {image.id} lacks the layer {missing[0]} its config lists")
    config_digest = f"sha256:{hashlib.sha256(config).hexdigest()}"
    if _blob_size(remote, repository, config_digest) is None:
        _upload(remote, repository, [config], config_digest)
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                "config": {"mediaType": CONFIG_MEDIA_TYPE, "size": len(config), "digest": config_digest},
                "layers": [{"mediaType": LAYER_MEDIA_TYPE, "size": layers[digest], "digest": digest}
                           for digest in diff_ids]}
    body = json.dumps(manifest, separators=(",", ":")).encode()
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{tag}"
    check(remote.request("PUT", url, data=body, headers={"Content-Type": MANIFEST_MEDIA_TYPE}), f"PUT {url}")
    pushed.digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    return pushed


def _stream(client, image, remote: RegistryClient, repository: str, diff_ids: list[str],
            held: dict[str, int]) -> tuple[Pushed, dict[str, int], bytes | None]:
    """One pass over `docker save`: (what was sent, each layer's uncompressed size by digest, the config bytes)."""
    pushed, layers, config = Pushed(digest=""), {}, None
    image_hex = image.id.split(":", 1)[1]
    save = client.api.get_image(image.id, chunk_size=READ_BYTES)
    with tarfile.open(fileobj=_Reader(save), mode="r|", bufsize=READ_BYTES) as saved:
        for member in saved:
            if not member.isfile():
                continue
            name = member.name.lstrip("./")
            known = f"sha256:{name.rsplit('/', 1)[-1]}" if name.startswith("blobs/sha256/") else None
            content = saved.extractfile(member)
            if name == f"{image_hex}.json":
                config = content.read()
            elif name.endswith("/layer.tar") or known in diff_ids:
                digest = _layer(content, member.size, known, remote, repository, diff_ids, held, pushed)
                layers[digest] = member.size
            elif known:  # the containerd store's OCI layout: its config, a manifest, or a compressed layer
                config = _oci_blob(content, member.size, remote, repository, diff_ids, pushed, layers) or config
    return pushed, layers, config


def _is_config(body: bytes, diff_ids: list[str]) -> bool:
    try:
        return json.loads(body).get("rootfs", {}).get("diff_ids") == diff_ids
    except (ValueError, AttributeError):
        return False


def _oci_blob(stream, size: int, remote: RegistryClient, repository: str, diff_ids: list[str], pushed: Pushed,
              layers: dict[str, int]) -> bytes | None:
    """A blob of an OCI-layout save: the config's bytes when it is the config; a gzip layer decompressed and sent
    up; anything else (a manifest, an index) passed over."""
    if size <= CONFIG_MAX_BYTES:  # Docker 20.10 names its config IMAGE_ID.json, so only this shape gets here
        body = stream.read()
        if _is_config(body, diff_ids):
            return body
        if not body.startswith(GZIP_MAGIC):
            return None
        stream = io.BytesIO(body)
    elif stream.peek(2)[:2] != GZIP_MAGIC:
        return None
    counted = _Counted(gzip.GzipFile(fileobj=stream, mode="rb"))
    layers[_send(counted, None, remote, repository, diff_ids, pushed)] = counted.count
    return None


class _Counted:
    """A stream that counts what was read from it: a decompressed layer's size is known once it is read."""

    def __init__(self, stream):
        self.stream, self.count = stream, 0

    def read(self, size: int) -> bytes:
        chunk = self.stream.read(size)
        self.count += len(chunk)
        return chunk


def _layer(stream, size: int, known: str | None, remote: RegistryClient, repository: str, diff_ids: list[str],
           held: dict[str, int], pushed: Pushed) -> str:
    """Send one saved layer up unless the registry holds it; its digest."""
    if known in held:
        pushed.held.append(known)
        return known
    if known is None and size in held.values():
        digest = _hash(stream)
        if held.get(digest) != size:
            raise _SizeTwin()
        pushed.held.append(digest)
        return digest
    return _send(stream, known, remote, repository, diff_ids, pushed)


def _send(stream, known: str | None, remote: RegistryClient, repository: str, diff_ids: list[str],
          pushed: Pushed) -> str:
    """Upload one layer's bytes; its digest, which must be one of the config's diff_ids."""
    digest = _upload(remote, repository, _chunks(stream), known)
    if digest not in diff_ids:
        raise RegistryError(f"a layer the engine saved ({digest}) is not one its config lists: the image changed "
                            "during the push? push it again")
    pushed.uploaded.append(digest)
    return digest


def _upload(remote: RegistryClient, repository: str, chunks, digest: str | None) -> str:
    """A chunked upload (POST, a PATCH per chunk, PUT with the digest, the OCI distribution spec's order); the
    digest of what was sent, checked against `digest` when given."""
    base = f"{remote.base_url}/v2/{remote.path(repository)}/blobs/uploads/"
    started = remote.request("POST", base)
    check(started, f"POST {base}")
    location, offset, sha = urllib.parse.urljoin(base, started.headers["Location"]), 0, hashlib.sha256()
    for chunk in _read_ahead(chunks):
        sha.update(chunk)
        sent = remote.request("PATCH", location, data=chunk, headers={
            "Content-Type": "application/octet-stream", "Content-Length": str(len(chunk)),
            "Content-Range": f"{offset}-{offset + len(chunk) - 1}"})
        check(sent, f"PATCH {location}")
        location, offset = urllib.parse.urljoin(base, sent.headers["Location"]), offset + len(chunk)
    found = f"sha256:{sha.hexdigest()}"
    if digest and found != digest:
        raise RegistryError(f"the engine saved other bytes ({found}) than its layer {digest}: push it again")
    separator = "&" if urllib.parse.urlsplit(location).query else "?"
    done = remote.request("PUT", f"{location}{separator}digest={found}", data=b"",
                          headers={"Content-Length": "0"})
    check(done, f"PUT {location}")
    return found


def _blob_size(remote: RegistryClient, repository: str, digest: str) -> int | None:
    url = f"{remote.base_url}/v2/{remote.path(repository)}/blobs/{digest}"
    answer = remote.request("HEAD", url)
    if answer.status_code == 404:
        return None
    check(answer, f"HEAD {url}")
    return int(answer.headers.get("Content-Length", -1))


def _chunks(stream) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_BYTES):
        yield chunk


def _read_ahead(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks, read by a thread while the caller sends the ones before, so that reading the engine's stream and
    sending to the registry overlap instead of taking turns. An error of the reading is raised here; when the caller
    stops early, the reader stops at its next chunk."""
    ahead: queue.Queue = queue.Queue(maxsize=READ_AHEAD_CHUNKS)
    stopped, end = threading.Event(), object()

    def put(item) -> bool:
        while not stopped.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
            put(end)
        except BaseException as error:  # handed to the caller's thread, which raises it
            put(error)

    reader = threading.Thread(target=read, name="read-ahead", daemon=True)
    reader.start()
    try:
        while (item := ahead.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stopped.set()
        reader.join()


def _hash(stream) -> str:
    sha = hashlib.sha256()
    for chunk in _chunks(stream):
        sha.update(chunk)
    return f"sha256:{sha.hexdigest()}"


class _Reader(io.RawIOBase):
    """The chunks docker-py yields for `docker save`, as the file tarfile reads in stream mode."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks, self._chunk, self._offset = iter(chunks), memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._offset == len(self._chunk):
            self._chunk, self._offset = memoryview(next(self._chunks, b"")), 0
            if not self._chunk:
                return 0
        size = min(len(buffer), len(self._chunk) - self._offset)
        buffer[:size] = self._chunk[self._offset:self._offset + size]
        self._offset += size
        return size
