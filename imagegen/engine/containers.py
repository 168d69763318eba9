"""The run edge (docker-py): run commands in images, inspect images, list their files.

The file listings exist to prove what an image does NOT contain (a CA bundle, a wheel):
`exported_file_paths` sees the final filesystem, `layer_file_paths` sees every layer, since a
file deleted in a later layer still ships in the earlier one.
"""

from __future__ import annotations

import heapq
import io
import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

import docker
import docker.errors
import docker.types
import requests.exceptions

from imagegen.core.errors import UserError

CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
NVIDIA_HOOK = "nvidia-container-runtime-hook"


class ContainerError(UserError):
    """A user-facing failure to run or inspect a container; the message is one clear line."""


@dataclass(frozen=True)
class ContainerRun:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


@dataclass(frozen=True)
class LayerFiles:
    layer: str  # the layer's path inside `docker save` output
    paths: set[str]


# docker save stages every layer of an image before its first byte: for a 6 GB image on a
# busy two-core machine that is past docker-py's default 60 s read timeout.
ENGINE_READ_TIMEOUT_S = 900


def docker_client() -> docker.DockerClient:
    """A docker-py client for the engine in the environment, or a clear error."""
    try:
        client = docker.from_env(timeout=ENGINE_READ_TIMEOUT_S)
        client.ping()
        return client
    except docker.errors.DockerException as err:
        raise ContainerError(f"no Docker daemon answers ({err}); start dockerd or set DOCKER_HOST") from None


def gpu_runtime_available(client: docker.DockerClient) -> tuple[bool, str]:
    """Whether containers on this daemon can be given GPUs, and why (not)."""
    info = client.info()
    runtimes = sorted(info.get("Runtimes") or {})
    if "nvidia" in runtimes:
        return True, "the daemon has the nvidia runtime"
    spec_dirs = info.get("CDISpecDirs") or list(CDI_SPEC_DIRS)
    specs = _cdi_specs(spec_dirs)
    if specs:
        return True, f"CDI device specs found: {', '.join(specs)}"
    # Docker's --gpus without a registered runtime works through this prestart hook.
    hook = shutil.which(NVIDIA_HOOK)
    if hook:
        return True, f"{hook} is installed"
    return False, (
        f"no GPU runtime: the daemon's runtimes are {', '.join(runtimes) or 'none'}, no CDI specs "
        f"in {', '.join(spec_dirs)}, no {NVIDIA_HOOK}; install the NVIDIA Container Toolkit"
    )


def _cdi_specs(spec_dirs: Iterable[str]) -> list[str]:
    # CDI dirs are read on this machine, which is the daemon's machine for a local engine.
    found = []
    for directory in spec_dirs:
        if os.path.isdir(directory):
            found += [
                os.path.join(directory, name)
                for name in sorted(os.listdir(directory))
                if name.endswith((".yaml", ".yml", ".json"))
            ]
    return found


def run_in_image(
    image: str,
    args: list[str],
    gpu: bool,
    user: str | None = None,
    env: dict | None = None,
    volumes: dict | None = None,
    timeout_s: int = 900,
    shm_size: str | None = None,
    *,
    client: docker.DockerClient | None = None,
) -> ContainerRun:
    """Run args in a fresh container of image; the container is always removed."""
    client = client or docker_client()
    device_requests = _gpu_request(client) if gpu else None
    container = _create(
        client,
        image,
        command=args,
        user=user,
        environment=env,
        volumes=volumes,
        shm_size=shm_size,
        device_requests=device_requests,
    )
    try:
        started = time.monotonic()
        _start(container, image)
        exit_code, timed_out = _wait(container, timeout_s)
        duration_s = time.monotonic() - started
        return ContainerRun(
            exit_code=exit_code,
            stdout=_decode(container.logs(stdout=True, stderr=False)),
            stderr=_decode(container.logs(stdout=False, stderr=True)),
            duration_s=duration_s,
            timed_out=timed_out,
        )
    finally:
        container.remove(force=True)


def _gpu_request(client: docker.DockerClient) -> list[docker.types.DeviceRequest]:
    available, reason = gpu_runtime_available(client)
    if not available:
        raise ContainerError(f"a GPU was requested but this engine cannot give one: {reason}")
    return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def _create(client: docker.DockerClient, image: str, **kwargs):
    # create + start rather than containers.run: run() leaks the container when start fails,
    # and pulls a missing image, which cannot work on machines without a registry.
    try:
        return client.containers.create(image, detach=True, **kwargs)
    except docker.errors.ImageNotFound:
        raise ContainerError(f"no local image {image}; build it first") from None
    except docker.errors.APIError as err:
        raise ContainerError(f"cannot create a container of {image}: {err.explanation or err}") from None


def _start(container, image: str) -> None:
    try:
        container.start()
    except docker.errors.APIError as err:
        raise ContainerError(f"cannot start a container of {image}: {err.explanation or err}") from None


def _wait(container, timeout_s: int) -> tuple[int, bool]:
    try:
        return container.wait(timeout=timeout_s)["StatusCode"], False
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
        try:
            container.kill()
        except docker.errors.APIError:
            pass  # it exited between the timeout and the kill
        return container.wait(timeout=60)["StatusCode"], True


def _decode(output: bytes) -> str:
    return output.decode("utf-8", errors="replace")


def image_facts(image: str, *, client: docker.DockerClient | None = None) -> dict:
    """What an image is: id, size, labels, user, entrypoint, cmd, created, layers."""
    client = client or docker_client()
    found = _image(client, image)
    config = found.attrs.get("Config") or {}
    layers = [{"created_by": entry.get("CreatedBy", ""), "size": entry.get("Size", 0)}
              for entry in reversed(found.history())]  # history is newest first; layers go up
    return {
        "id": found.id,  # the config's digest on Docker's own store; the manifest's on the containerd store
        "tags": found.tags,
        "platform": f"{found.attrs.get('Os', 'linux')}/{found.attrs.get('Architecture', '')}",
        # What the layers unpack to. Not the inspect's Size: on the containerd image store (Docker 29's default) that
        # is the compressed content, about half of it for the cpu image (tests/test_engine26_pipeline.py); its
        # history counts what each layer's snapshot holds on disk
        "size": sum(layer["size"] for layer in layers),
        "labels": config.get("Labels") or {},
        "user": config.get("User") or "",
        "entrypoint": config.get("Entrypoint"),
        "cmd": config.get("Cmd"),
        "created": found.attrs.get("Created"),
        "layers": layers,
    }


def has_image(image: str) -> bool | None:
    """Whether the engine holds the image; None when no engine answers."""
    try:
        client = docker_client()
    except ContainerError:
        return None
    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException:
        return None


def _image(client: docker.DockerClient, image: str):
    try:
        return client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ContainerError(f"no local image {image}; build it first") from None


def exported_file_paths(image: str, *, client: docker.DockerClient | None = None) -> set[str]:
    """Absolute paths of every non-directory entry in the image's final filesystem.

    The export of a created container also holds the engine's own mount points
    (/.dockerenv, /etc/hostname, /etc/hosts, /etc/resolv.conf).
    """
    return set(exported_file_sizes(image, client=client))


def exported_file_sizes(image: str, *, client: docker.DockerClient | None = None) -> dict[str, int]:
    """Every non-directory entry of the image's final filesystem and its size in bytes
    (0 for links: a hard link's bytes are counted once, at its first name)."""
    client = client or docker_client()
    _image(client, image)
    # A command is needed to create a container of an image without CMD; it never runs.
    container = _create(client, image, command=["/imagegen-never-runs"])
    try:
        with tarfile.open(fileobj=_ChunkReader(container.export()), mode="r|") as tar:
            return {_absolute(member.name): member.size if member.isfile() else 0 for member in tar
                    if not member.isdir()}
    finally:
        container.remove(force=True)


def largest_files(image: str, count: int, *, client: docker.DockerClient | None = None) -> list[tuple[str, int]]:
    """The `count` largest files of the image's final filesystem, largest first."""
    sizes = exported_file_sizes(image, client=client)
    return heapq.nlargest(count, sizes.items(), key=lambda item: item[1])


def layer_file_paths(image: str, *, client: docker.DockerClient | None = None) -> list[LayerFiles]:
    """For each layer of the image, bottom first, the paths of its non-directory entries.

    Reads `docker save` as a stream: layer tars are listed as they pass, then put in order
    by manifest.json, which may come after them (and says which blobs are layers at all).
    """
    client = client or docker_client()
    saved = _image(client, image).save(named=False)
    listings: dict[str, set[str]] = {}
    layer_order: list[str] = []
    with tarfile.open(fileobj=_ChunkReader(saved), mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            content = outer.extractfile(member)
            if member.name == "manifest.json":
                layer_order = json.load(content)[0]["Layers"]
            else:
                paths = _tar_paths(content)
                if paths is not None:
                    listings[member.name] = paths
    return [LayerFiles(layer=name, paths=listings.get(name, set())) for name in layer_order]


def _tar_paths(content) -> set[str] | None:
    """The non-directory paths of a (possibly compressed) tar, None if it is not a tar."""
    try:
        with tarfile.open(fileobj=content, mode="r|*") as tar:
            return {_absolute(member.name) for member in tar if not member.isdir()}
    except tarfile.ReadError:
        return None  # a config or index JSON blob in an OCI-layout save


def _absolute(member_name: str) -> str:
    name = member_name.removeprefix("./").lstrip("/")
    return f"/{name}"


class _ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks, so tarfile can stream it."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = iter(chunks)
        self._pending = memoryview(b"")  # a view, so consuming a chunk copies nothing

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
