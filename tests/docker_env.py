"""Fixtures and helpers for tests against the real Docker engine and a real registry.

pytest-docker is not used: it starts services from a docker compose file, while our
registry is Debian's `docker-registry` binary on loopback (no registry image can be pulled
here), so a subprocess fixture is simpler and needs neither compose nor a pull.

Without an engine the tests skip, saying why; with IMAGEGEN_REQUIRE_DOCKER=1 (set by CI)
they fail instead, so a broken CI machine cannot pass by skipping everything.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import docker
import docker.errors
import pytest

from imagegen.engine import containers
from imagegen.engine.containers import ContainerError
from imagegen.engine.buildkit import BuildClient, BuildClientError, find_build_client
from testbed import registry as loopback

BASE_IMAGE = "local/debian:bookworm"
TEST_REPOSITORY = "imagegen-test"
REQUIRE_DOCKER_VAR = "IMAGEGEN_REQUIRE_DOCKER"
CA_BUNDLE_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")


def unavailable(reason: str) -> None:
    """Skip the test for a missing engine piece, or fail when CI requires the engine."""
    if os.environ.get(REQUIRE_DOCKER_VAR) == "1":
        pytest.fail(f"{reason} (and {REQUIRE_DOCKER_VAR}=1)", pytrace=False)
    pytest.skip(reason)


def docker_cli(*args: str, timeout: int = 900, check: bool = True,
               input: str | None = None) -> subprocess.CompletedProcess:
    """`docker ARGS` as a user types it (the image tests drive the CLI, not docker-py); asserts success unless told.
    input: what the command reads on its standard input (with `docker run -i`)."""
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=input)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def unique_name(stem: str) -> str:
    """A name no other test run uses: engineers share one engine."""
    return f"{stem}-{uuid.uuid4().hex[:10]}"


def ensure_local_base_image(client: docker.DockerClient, ref: str = BASE_IMAGE) -> str:
    """Make `ref` exist, bootstrapping Debian bookworm into it if needed (about 30 s)."""
    try:
        client.images.get(ref)
        return ref
    except docker.errors.ImageNotFound:
        pass
    if shutil.which("debootstrap") is None:
        unavailable(f"{ref} is missing and debootstrap is not installed (run .ci/setup-docker)")
    with tempfile.TemporaryDirectory(prefix="imagegen-rootfs-") as rootfs:
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", rootfs],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", ref], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            pytest.fail(f"tar of the bootstrapped rootfs for {ref} failed", pytrace=False)
    return ref


@dataclass(frozen=True)
class AuthRegistry:
    """A registry that asks for a user name and password (htpasswd, bcrypt)."""

    host: str
    username: str
    password: str = field(repr=False)


def pytest_report_header(config) -> str | None:
    """The engine's free disk, first in the log: a full disk fails builds far from its cause."""
    try:
        client = containers.docker_client()
        root = client.info()["DockerRootDir"]
        cache_bytes = sum(record["Size"] for record in build_cache_records(client))
    except (ContainerError, docker.errors.DockerException, KeyError):
        return None
    free_bytes = shutil.disk_usage(root).free if Path(root).exists() else None
    free = f"{free_bytes / 1e9:.1f} GB free" if free_bytes is not None else "free space unknown (not on this host)"
    return f"docker engine: {root} {free}, build cache {cache_bytes / 1e9:.1f} GB"


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        return containers.docker_client()
    except ContainerError as err:
        unavailable(str(err))


@pytest.fixture(scope="session")
def build_client(docker_client) -> BuildClient:
    try:
        return find_build_client()
    except BuildClientError as err:
        unavailable(str(err))


@pytest.fixture(scope="session")
def local_base_image(docker_client) -> str:
    return ensure_local_base_image(docker_client)


@contextmanager
def local_tags_made_under(host: str) -> Iterator[None]:
    """Removes, on leaving, the engine's tags under HOST/ made inside the block: a push tags the local
    image `HOST/REPOSITORY:TAG` first, and these tags would outlive the registry that gave them meaning."""
    try:
        client = containers.docker_client()
    except ContainerError:
        yield  # no engine: nothing can be tagged
        return
    before = set(tags_under(client, host))
    try:
        yield
    finally:
        for tag in set(tags_under(client, host)) - before:
            try:
                client.images.remove(tag)
            except docker.errors.APIError:
                pass  # still used by a container a test kept


def tags_under(client: docker.DockerClient, host: str) -> list[str]:
    return [tag for image in client.images.list() for tag in image.tags if tag.startswith(f"{host}/")]


@contextmanager
def serve_registry(workdir: Path, htpasswd: Path | None = None) -> Iterator[str]:
    """Debian's docker-registry on a free 127.0.0.1 port (testbed/registry.py); yields
    "127.0.0.1:PORT"."""
    binary = shutil.which("docker-registry")
    if binary is None:
        unavailable("docker-registry is not installed (run .ci/setup-docker)")
    try:
        with loopback.serve(workdir, htpasswd, binary) as host, local_tags_made_under(host):
            yield host
    except loopback.RegistryNotServing as error:
        pytest.fail(str(error), pytrace=False)
    finally:
        # Pushed images are gigabytes; pytest keeps its last temp dirs, so drop the blobs now.
        shutil.rmtree(workdir / loopback.STORAGE, ignore_errors=True)


@pytest.fixture(scope="session")
def arm64_base_image(docker_client) -> str:
    """The linux/arm64 Debian base .ci/setup-docker makes (debootstrap --arch arm64, under QEMU)."""
    try:
        found = docker_client.images.get("local/debian:bookworm-arm64")
    except docker.errors.ImageNotFound:
        unavailable("local/debian:bookworm-arm64 is missing (run .ci/setup-docker --arm64, which builds it)")
    if found.attrs.get("Architecture") != "arm64":
        unavailable(f"local/debian:bookworm-arm64 is {found.attrs.get('Architecture')}, not arm64")
    return "local/debian:bookworm-arm64"


@pytest.fixture(scope="session")
def registry(tmp_path_factory) -> Iterator[str]:
    """A registry anyone may push to; yields "127.0.0.1:PORT"."""
    with serve_registry(tmp_path_factory.mktemp("registry")) as host:
        yield host


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory) -> Iterator[AuthRegistry]:
    """A registry with htpasswd authentication and one user, as a private registry is."""
    import bcrypt  # a test tool: the registry reads bcrypt htpasswd entries, as `htpasswd -B` writes them

    workdir = tmp_path_factory.mktemp("auth-registry")
    user = AuthRegistry("", "imagegen-ci", uuid.uuid4().hex)
    htpasswd = workdir / "htpasswd"
    htpasswd.write_text(f"{user.username}:{bcrypt.hashpw(user.password.encode(), bcrypt.gensalt()).decode()}\n")
    with serve_registry(workdir, htpasswd) as host:
        yield AuthRegistry(host, user.username, user.password)


@pytest.fixture(scope="session")
def ca_bundle() -> Path:
    """The CA bundle the host trusts (the TLS-intercepting proxy's CA is in it)."""
    for var in CA_BUNDLE_VARS:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return Path(value)
    unavailable(f"no CA bundle: none of {', '.join(CA_BUNDLE_VARS)} names a file")


def build_cache_records(client: docker.DockerClient) -> list[dict]:
    return client.api.df().get("BuildCache") or []


@contextmanager
def build_cache_made_inside(client: docker.DockerClient) -> Iterator[None]:
    """On leaving, prunes the build-cache records made inside the block that no image holds any more
    (remove the block's images first). A --no-cache rebuild of the cpu image leaves 6 GB of records
    that outlive its images; CI runs on one engine, so each run would leave them behind until the disk
    filled. Records that were there before, or that an image still holds, stay."""
    before = {record["ID"] for record in build_cache_records(client)}
    try:
        yield
    finally:
        prune_unheld_records(client, before)


def prune_unheld_records(client: docker.DockerClient, keep: set[str]) -> None:
    # The prune API takes one id per call, and a record goes only once its children have: newest first,
    # then again for the parents left over, until a pass prunes nothing.
    keep = set(keep)
    while True:
        loose = [record for record in build_cache_records(client)
                 if record["ID"] not in keep and not record["InUse"] and not record["Shared"]]
        pruned = set()
        for record in sorted(loose, key=lambda record: record["CreatedAt"], reverse=True):
            pruned.update(client.api.prune_builds(filters={"id": [record["ID"]]}).get("CachesDeleted") or [])
        if not pruned:
            return
        keep |= pruned


def prune_cache_mount(client: docker.DockerClient, target: str) -> int:
    """Empties the build cache's mount at TARGET (e.g. /root/.cache/uv): the bytes it held. The next build that
    mounts it downloads again; no layer's cache depends on it."""
    freed = 0
    for record in build_cache_records(client):
        if record["Type"] == "exec.cachemount" and f" {target} " in f" {record['Description']} " \
                and not record["InUse"]:
            done = client.api.prune_builds(filters={"id": [record["ID"]]})
            freed += done.get("SpaceReclaimed") or 0
    return freed


@pytest.fixture
def throwaway_tag(docker_client) -> Iterator[Callable[[str], str]]:
    """Makes unique local tags `imagegen-test/STEM:ID`; removes them after the test."""
    made: list[str] = []

    def make(stem: str) -> str:
        tag = f"{TEST_REPOSITORY}/{stem}:{uuid.uuid4().hex[:10]}"
        made.append(tag)
        return tag

    yield make
    for tag in made:
        try:
            docker_client.images.remove(tag)
        except docker.errors.APIError:
            pass  # never built (a failing build), or still used by a kept container


# --- images and repositories of the registry tests ------------------------------------------------------------


@pytest.fixture
def tiny_image(build_client, throwaway_tag, tmp_path):
    """Builds a distinct FROM-scratch image (one file with unique content) per call."""

    def build(name: str, labels: dict | None = None) -> str:
        context = tmp_path / name
        context.mkdir()
        (context / "payload").write_text(f"{name} {uuid.uuid4().hex}\n")
        (context / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
        outcome = build_client.build(context, [throwaway_tag(name)], lambda _: None, labels=labels or {})
        assert outcome.ok, outcome.log_tail
        return outcome.image_id

    return build


def remove_local_refs(docker_client, prefix: str) -> None:
    """Drop the local tags (and REPO@DIGEST references a pull by digest leaves) under `prefix`."""
    for image in docker_client.images.list():
        # The images are the test's own (unique payloads), so removing them whole is safe.
        refs = image.tags + image.attrs.get("RepoDigests", [])
        if any(ref.startswith((f"{prefix}:", f"{prefix}@")) for ref in refs):
            try:
                docker_client.images.remove(image.id, force=True)
            except docker.errors.ImageNotFound:
                pass


@pytest.fixture
def repository(registry, docker_client):
    """A repository name of its own; drops the local registry-prefixed tags afterwards."""
    name = unique_name("imagegen-test/push")
    yield name
    remove_local_refs(docker_client, f"{registry}/{name}")


@pytest.fixture
def private_repository(auth_registry, docker_client):
    name = unique_name("imagegen-test/private")
    yield name
    remove_local_refs(docker_client, f"{auth_registry.host}/{name}")


OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def registry_manifest(host: str, repository: str, tag: str) -> dict:
    """The image manifest the loopback registry holds under the tag, as a client asking for either kind gets it."""
    request = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{tag}",
                                     headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def podman_pull(ref: str, tmp_path: Path) -> tuple[str, list[str]]:
    """Pull ref from a loopback registry with podman into storage of its own (another engine than Docker's, and
    empty); (the image id it got, its layers' diff_ids). Skips when podman is missing."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (bash .ci/setup --tests installs it): the pull back was not tried")
    runroot = tempfile.mkdtemp(prefix="igpod", dir="/tmp")  # podman refuses a runroot over 50 characters
    storage = ["podman", "--root", str(tmp_path / "podman"), "--runroot", runroot, "--storage-driver", "vfs"]
    try:
        pulled = subprocess.run([*storage, "pull", "--quiet", "--tls-verify=false", ref], capture_output=True,
                                text=True, timeout=120)
        assert pulled.returncode == 0, pulled.stderr
        layers = subprocess.run([*storage, "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                 pulled.stdout.strip()], capture_output=True, text=True, check=True).stdout
        return pulled.stdout.strip(), json.loads(layers)
    finally:
        subprocess.run([*storage, "system", "reset", "-f"], capture_output=True)
        shutil.rmtree(runroot, ignore_errors=True)


def push_twice(image_id: str, registry: str, repository: str, client, compression: str):
    """Push under 1.0.0 and latest, then 1.0.0 again: the second finds it published. (the first outcome, the
    manifest 1.0.0 holds)."""
    from imagegen.engine.registry.http import remote_digest
    from imagegen.stages.publish import push_image

    outcome = push_image(image_id, registry, repository, ["1.0.0"], ["latest"], False, client=client,
                         compression=compression)
    again = push_image(image_id, registry, repository, ["1.0.0"], [], False, client=client, compression=compression)
    assert outcome.pushed_tags == ["1.0.0", "latest"]
    assert remote_digest(registry, repository, "latest") == outcome.digest == remote_digest(registry, repository,
                                                                                            "1.0.0")
    assert again.already_published == ["1.0.0"] and again.pushed_tags == []  # known by its config or inputs label
    return outcome, registry_manifest(registry, repository, "1.0.0")
