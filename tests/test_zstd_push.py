"""`imagegen push --compression zstd`: the layers go up as zstd through skopeo, to a real registry (Debian's
docker-registry on loopback), and podman (which takes zstd, unlike Docker 20.10) pulls the very image back.
`imagegen build --push --compression zstd` takes the same path (publish.push_image), checked here without an engine."""

from __future__ import annotations

import shutil

import pytest

from imagegen.engine.registry.http import Credentials, RegistryError, remote_digest
from imagegen.render.contexts import RenderOptions
from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages import pipeline, publish
from imagegen.stages.publish import push_image
from imagegen.stages.results import TestResult as ImageTestResult

from tests.docker_env import podman_pull, push_twice
from tests.helpers import locked_images

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed "
                                  "(bash .ci/setup --tests installs it)")


@needs_skopeo
def test_a_zstd_push_has_zstd_layers_of_the_same_content_and_podman_pulls_it(registry, repository, tiny_image,
                                                                              docker_client, tmp_path):
    image_id = tiny_image("zstd", labels={INPUTS_LABEL: "inputs-of-this-test"})

    _, held = push_twice(image_id, registry, repository, docker_client, "zstd")

    assert held["mediaType"] == OCI_MANIFEST  # zstd layers need OCI's manifest, so the config is OCI's too
    assert [layer["mediaType"] for layer in held["layers"]] == ["application/vnd.oci.image.layer.v1.tar+zstd"]
    pulled_id, layers = podman_pull(f"{registry}/{repository}:1.0.0", tmp_path)
    assert "sha256:" + pulled_id == held["config"]["digest"]
    # The same files, byte for byte: the uncompressed layers' digests are the local image's.
    assert layers == docker_client.images.get(image_id).attrs["RootFS"]["Layers"]


@pytest.mark.parametrize("compression, refusal", [("zstd", "zstd, through skopeo"), ("none", "docker login")])
def test_a_push_to_a_private_registry_uses_the_credentials_and_never_shows_the_password(
        compression, refusal, auth_registry, private_repository, tiny_image, docker_client):
    """Both pushes of our own (skopeo's zstd, the uncompressed one) with the credentials docker's push takes."""
    if compression == "zstd" and shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (bash .ci/setup --tests installs it)")
    login = Credentials(auth_registry.username, auth_registry.password)
    image_id = tiny_image(f"{compression}-private")

    outcome = push_image(image_id, auth_registry.host, private_repository, ["1.0.0"], [], False,
                         client=docker_client, credentials=login, compression=compression)

    assert outcome.pushed_tags == ["1.0.0"]
    assert remote_digest(auth_registry.host, private_repository, "1.0.0", login) == outcome.digest
    wrong = Credentials(auth_registry.username, "not-the-password")
    with pytest.raises(RegistryError, match=refusal) as refused:
        push_image(tiny_image(f"{compression}-wrong"), auth_registry.host, private_repository, [], ["latest"],
                   False, client=docker_client, credentials=wrong, compression=compression)
    assert "not-the-password" not in str(refused.value)


def test_without_skopeo_a_zstd_push_says_what_to_install_before_asking_the_engine(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # reaching for the engine would fail otherwise
    with pytest.raises(RegistryError, match="apt-get install skopeo .* --compression gzip"):
        push_image("sha256:" + "0" * 64, "127.0.0.1:9", "imagegen-test/x", ["1"], [], False, compression="zstd")


def build_run(tmp_path, compression: str) -> pipeline.Run:
    """`imagegen build --image cpu --push --registry 127.0.0.1:9 --compression COMPRESSION` as the pipeline gets it."""
    (cpu,) = [image for image in locked_images() if image.key == "cpu"]
    return pipeline.Run(images=[cpu], render_options=RenderOptions(), source_dir=tmp_path, pip=None,
                        docker_binary=None, builder=None, context_dir=tmp_path / "contexts", no_cache=False,
                        keep_going=False, test=True, checking=pipeline.Checking("", None), registry="127.0.0.1:9",
                        force=False, report_path=tmp_path / "build.json", compression=compression)


@pytest.mark.parametrize("compression", ["zstd", "gzip", "none"])
def test_build_pushes_each_tested_image_with_its_compression_and_says_which(compression, tmp_path, monkeypatch):
    run = build_run(tmp_path, compression)
    (image,) = run.images
    asked = []

    def pushed(image_id, registry, repository, version_tags, alias_tags, force, **kwargs):
        asked.append(kwargs["compression"])
        return publish.PushOutcome("sha256:" + "d" * 64, pushed_tags=version_tags)

    monkeypatch.setattr(publish, "push_image", pushed)
    monkeypatch.setattr(publish, "_attach_sbom", lambda *args: None)
    monkeypatch.setattr(publish, "_attach_provenance", lambda *args: None)
    said = []
    tested = ImageTestResult(image.name, image.ref(), "passed", image_id="sha256:" + "1" * 64, platform=image.platform)

    result = pipeline._push_tested(image, tested.image_id, tested, run, said.append)

    assert asked == [compression] and (result.status, result.compression) == ("pushed", compression)
    (line,) = said
    said_as = {"none": "uncompressed"}.get(compression, compression)
    assert line.startswith("pushed cpu to 127.0.0.1:9/") and line.endswith(f" ({said_as} layers)")


def test_build_with_a_zstd_push_and_no_skopeo_stops_before_it_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(pipeline, "find_build_client", lambda *args: pytest.fail("asked for a build client"))
    with pytest.raises(RegistryError, match="apt-get install skopeo"):
        pipeline.build_test_push(build_run(tmp_path, "zstd"), echo=lambda line: None)
