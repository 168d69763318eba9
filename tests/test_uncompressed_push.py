"""`imagegen push --compression none`: the engine's saved layers go up as they are, under Docker's media type for
an uncompressed layer, to a real registry (Debian's docker-registry on loopback); the engine (Docker 20.10) and
podman pull the very image back. A layer the registry holds is not sent again."""

from __future__ import annotations

import pytest

from imagegen.engine.registry import uncompressed
from imagegen.engine.registry.http import RegistryClient
from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages.publish import push_image

from tests.docker_env import podman_pull, push_twice, registry_manifest


def layered_image(build_client, throwaway_tag, tmp_path, name: str, parent: str, files: dict[str, str]) -> str:
    """FROM parent, one COPY (one layer) per file, in order; its tag (BuildKit takes no image id in FROM)."""
    context = tmp_path / name
    context.mkdir()
    lines = [f"FROM {parent}"]
    for file, text in files.items():
        (context / file).write_text(text)
        lines.append(f"COPY {file} /{file}")
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    tag = throwaway_tag(name)
    outcome = build_client.build(context, [tag], lambda _: None, labels={INPUTS_LABEL: f"inputs-of-{name}"})
    assert outcome.ok, outcome.log_tail
    return tag


def test_an_uncompressed_push_holds_the_engines_layers_and_engines_pull_it_back(
        registry, repository, tiny_image, docker_client, tmp_path):
    image_id = tiny_image("raw")
    local = docker_client.images.get(image_id)

    outcome, held = push_twice(image_id, registry, repository, docker_client, "none")

    assert held["mediaType"] == uncompressed.MANIFEST_MEDIA_TYPE
    assert held["config"]["digest"] == image_id  # the image's own config: known by its id
    assert [(layer["mediaType"], layer["digest"]) for layer in held["layers"]] == [
        (uncompressed.LAYER_MEDIA_TYPE, digest) for digest in local.attrs["RootFS"]["Layers"]]
    docker_client.images.remove(image_id, force=True)
    assert docker_client.images.pull(f"{registry}/{repository}@{outcome.digest}").id == image_id
    pulled_id, layers = podman_pull(f"{registry}/{repository}:1.0.0", tmp_path)
    assert ("sha256:" + pulled_id, layers) == (image_id, local.attrs["RootFS"]["Layers"])


def test_layers_the_registry_holds_are_not_sent_again(registry, repository, build_client, throwaway_tag,
                                                      docker_client, tmp_path):
    remote = RegistryClient(registry)
    first = layered_image(build_client, throwaway_tag, tmp_path, "first", "scratch", {"one": "1" * 1000})
    # `two` has the size of `one` (a layer the registry holds, of the same tar size) and other bytes;
    # `three` is a layer of another size on top of both.
    second = layered_image(build_client, throwaway_tag, tmp_path, "second", first, {"two": "2" * 1000,
                                                                                    "three": "3" * 5000})
    one, two, three = docker_client.images.get(second).attrs["RootFS"]["Layers"]

    first_push = uncompressed.push_tag(docker_client, docker_client.images.get(first), remote, repository, "first")
    second_push = uncompressed.push_tag(docker_client, docker_client.images.get(second), remote, repository, "second")

    assert (first_push.uploaded, first_push.held) == ([one], [])
    # The engine streams the layers in no fixed order: met before `one`, `two` reads as `one`'s size twin and
    # the stream is read again, every layer sent; else `one` is skipped.
    assert sorted(second_push.uploaded) in (sorted([two, three]), sorted([one, two, three]))
    assert set(second_push.held) == ({one} if len(second_push.uploaded) == 2 else set())
    assert registry_manifest(registry, repository, "second")["config"]["digest"] == docker_client.images.get(second).id
    third = layered_image(build_client, throwaway_tag, tmp_path, "third", first, {"four": "4" * 9000})
    (_, four) = docker_client.images.get(third).attrs["RootFS"]["Layers"]
    third_push = uncompressed.push_tag(docker_client, docker_client.images.get(third), remote, repository, "third")
    assert (third_push.uploaded, third_push.held) == ([four], [one])


def test_one_image_goes_gzip_to_the_internet_and_uncompressed_to_a_namespace_of_its_own(
        registry, repository, tiny_image, docker_client):
    image_id = tiny_image("both")

    gzip = push_image(image_id, registry, repository, ["1.0.0"], [], False, client=docker_client)
    raw = push_image(image_id, f"{registry}/raw", repository, ["1.0.0"], [], False, client=docker_client,
                     compression="none")

    assert gzip.pushed_tags == raw.pushed_tags == ["1.0.0"] and gzip.digest != raw.digest
    kinds = {registry_manifest(host, path, "1.0.0")["layers"][0]["mediaType"]
             for host, path in ((registry, repository), (registry, f"raw/{repository}"))}
    assert kinds == {"application/vnd.docker.image.rootfs.diff.tar.gzip", uncompressed.LAYER_MEDIA_TYPE}


def test_read_ahead_yields_every_chunk_in_order_and_raises_the_readers_error_in_the_caller():
    assert list(uncompressed._read_ahead(iter([b"a", b"b", b"c"]))) == [b"a", b"b", b"c"]

    def broken():
        yield b"a"
        raise OSError("the engine's stream ended early")

    chunks = uncompressed._read_ahead(broken())
    assert next(chunks) == b"a"
    with pytest.raises(OSError, match="ended early"):
        next(chunks)


def test_read_ahead_stops_reading_when_the_caller_stops():
    read = []

    def endless():
        while True:
            read.append(len(read))
            yield b"x"

    chunks = uncompressed._read_ahead(endless())
    assert next(chunks) == b"x"
    chunks.close()  # the upload failed: the reader must not go on through the engine's stream
    stopped_at = len(read)
    assert stopped_at <= 2 + uncompressed.READ_AHEAD_CHUNKS
    assert len(read) == stopped_at
