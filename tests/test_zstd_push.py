"""`imagegen push --compression zstd`: the layers go up as zstd through skopeo, to a real registry (Debian's
docker-registry on loopback), and podman (which takes zstd, unlike Docker 20.10) pulls the very image back."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.request

import pytest

from imagegen.engine.registry.http import Credentials, RegistryError, remote_digest
from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages.publish import push_image

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed "
                                  "(bash .ci/setup --tests installs it)")


def manifest(host: str, repository: str, tag: str) -> dict:
    request = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{tag}", headers={
        "Accept": f"{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


@needs_skopeo
def test_a_zstd_push_has_zstd_layers_of_the_same_content_and_podman_pulls_it(registry, repository, tiny_image,
                                                                              docker_client, tmp_path):
    image_id = tiny_image("zstd", labels={INPUTS_LABEL: "inputs-of-this-test"})

    outcome = push_image(image_id, registry, repository, ["1.0.0"], ["latest"], False, client=docker_client,
                         compression="zstd")
    again = push_image(image_id, registry, repository, ["1.0.0"], [], False, client=docker_client,
                       compression="zstd")

    assert outcome.pushed_tags == ["1.0.0", "latest"]
    assert remote_digest(registry, repository, "latest") == outcome.digest == remote_digest(registry, repository,
                                                                                            "1.0.0")
    held = manifest(registry, repository, "1.0.0")
    assert held["mediaType"] == OCI_MANIFEST  # zstd layers need OCI's manifest, so the config is OCI's too
    assert [layer["mediaType"] for layer in held["layers"]] == ["application/vnd.oci.image.layer.v1.tar+zstd"]
    assert again.already_published == ["1.0.0"] and again.pushed_tags == []  # known by its inputs label
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (bash .ci/setup --tests installs it): the pull back was not tried")
    runroot = tempfile.mkdtemp(prefix="igpod", dir="/tmp")  # podman refuses a runroot over 50 characters
    storage = ["podman", "--root", str(tmp_path / "podman"), "--runroot", runroot, "--storage-driver", "vfs"]
    try:
        pulled = subprocess.run([*storage, "pull", "--quiet", "--tls-verify=false", f"{registry}/{repository}:1.0.0"],
                                capture_output=True, text=True, timeout=120)
        assert pulled.returncode == 0, pulled.stderr
        assert "sha256:" + pulled.stdout.strip() == held["config"]["digest"]
        layers = subprocess.run([*storage, "image", "inspect", "--format", "{{json .RootFS.Layers}}",
                                 pulled.stdout.strip()], capture_output=True, text=True, check=True).stdout
        # The same files, byte for byte: the uncompressed layers' digests are the local image's.
        assert json.loads(layers) == docker_client.images.get(image_id).attrs["RootFS"]["Layers"]
    finally:
        subprocess.run([*storage, "system", "reset", "-f"], capture_output=True)
        shutil.rmtree(runroot, ignore_errors=True)


@needs_skopeo
def test_a_zstd_push_to_a_private_registry_uses_the_credentials_and_never_shows_the_password(
        auth_registry, private_repository, tiny_image, docker_client):
    login = Credentials(auth_registry.username, auth_registry.password)
    image_id = tiny_image("zstd-private")

    outcome = push_image(image_id, auth_registry.host, private_repository, ["1.0.0"], [], False,
                         client=docker_client, credentials=login, compression="zstd")

    assert outcome.pushed_tags == ["1.0.0"]
    assert remote_digest(auth_registry.host, private_repository, "1.0.0", login) == outcome.digest
    wrong = Credentials(auth_registry.username, "not-the-password")
    with pytest.raises(RegistryError, match="zstd, through skopeo") as refused:
        push_image(tiny_image("zstd-wrong"), auth_registry.host, private_repository, [], ["latest"], False,
                   client=docker_client, credentials=wrong, compression="zstd")
    assert "not-the-password" not in str(refused.value)


def test_without_skopeo_a_zstd_push_says_what_to_install_before_asking_the_engine(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # reaching for the engine would fail otherwise
    with pytest.raises(RegistryError, match="apt-get install skopeo .* --compression gzip"):
        push_image("sha256:" + "0" * 64, "127.0.0.1:9", "imagegen-test/x", ["1"], [], False, compression="zstd")
