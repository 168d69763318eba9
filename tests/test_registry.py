"""Pushes to a real registry (Debian's docker-registry on loopback) through the real engine."""

from __future__ import annotations

import uuid

import docker.errors
import pytest

from imagegen.registry import RegistryError, push_image, remote_digest
from tests.docker_env import unique_name


@pytest.fixture
def tiny_image(build_client, throwaway_tag, tmp_path):
    """Builds a distinct FROM-scratch image (one file with unique content) per call."""

    def build(name: str, labels: dict | None = None) -> str:
        context = tmp_path / name
        context.mkdir()
        (context / "payload").write_text(f"{name} {uuid.uuid4().hex}\n")
        (context / "Dockerfile").write_text("FROM scratch\nCOPY payload /payload\n")
        outcome = build_client.build(context, None, [throwaway_tag(name)], {}, labels or {}, {}, lambda _: None)
        assert outcome.ok, outcome.log_tail
        return outcome.image_id

    return build


@pytest.fixture
def repository(registry, docker_client):
    """A repository name of its own; drops the local registry-prefixed tags afterwards."""
    name = unique_name("imagegen-test/push")
    yield name
    prefix = f"{registry}/{name}"
    for image in docker_client.images.list():
        # Pulling by digest leaves a REPO@DIGEST reference besides the pushed tags; the
        # images are this test's own (unique payloads), so removing them whole is safe.
        refs = image.tags + image.attrs.get("RepoDigests", [])
        if any(ref.startswith((f"{prefix}:", f"{prefix}@")) for ref in refs):
            try:
                docker_client.images.remove(image.id, force=True)
            except docker.errors.ImageNotFound:
                pass


def test_push_version_and_alias_then_pull_back_by_digest(registry, repository, tiny_image, docker_client):
    image_id = tiny_image("first")

    outcome = push_image(image_id, registry, repository, ["1.0.0"], ["latest"], force=False, client=docker_client)

    assert outcome.pushed_tags == ["1.0.0", "latest"]
    assert outcome.refused == [] and outcome.already_published == []
    assert outcome.digest.startswith("sha256:")
    assert remote_digest(registry, repository, "1.0.0") == outcome.digest
    assert remote_digest(registry, repository, "latest") == outcome.digest
    pulled = docker_client.images.pull(f"{registry}/{repository}@{outcome.digest}")
    assert pulled.id == image_id


def test_remote_digest_of_an_absent_tag_is_none(registry, repository):
    assert remote_digest(registry, repository, "never-pushed") is None


def test_same_image_again_is_already_published_and_aliases_still_move(
    registry, repository, tiny_image, docker_client
):
    image_id = tiny_image("same")
    first = push_image(image_id, registry, repository, ["1.0.0"], ["latest"], force=False, client=docker_client)

    again = push_image(image_id, registry, repository, ["1.0.0"], ["latest"], force=False, client=docker_client)

    assert again.already_published == ["1.0.0"]
    assert again.pushed_tags == ["latest"]
    assert again.digest == first.digest


def test_another_build_of_the_same_inputs_is_already_published_and_aliases_follow_the_registry(
    registry, repository, tiny_image, docker_client
):
    inputs = {"io.imagegen.inputs": f"sha256:{uuid.uuid4().hex}"}
    first = push_image(tiny_image("build1", inputs), registry, repository, ["1.0.0"], [], False, client=docker_client)
    rebuilt = tiny_image("build2", inputs)  # other bits (its payload), the same inputs

    outcome = push_image(rebuilt, registry, repository, ["1.0.0"], ["latest"], force=False, client=docker_client)

    assert (outcome.already_published, outcome.refused, outcome.pushed_tags) == (["1.0.0"], [], ["latest"])
    # The alias holds what the version tag holds, not the local rebuild.
    assert outcome.digest == first.digest == remote_digest(registry, repository, "latest")
    other = push_image(tiny_image("build3", {"io.imagegen.inputs": "sha256:other"}), registry, repository, ["1.0.0"],
                       [], False, client=docker_client)
    assert other.refused and other.refused[0][0] == "1.0.0"


def test_different_image_under_a_published_version_is_refused(registry, repository, tiny_image, docker_client):
    published = push_image(tiny_image("old"), registry, repository, ["1.0.0"], ["latest"], False, client=docker_client)
    other_id = tiny_image("new")

    outcome = push_image(other_id, registry, repository, ["1.0.0"], ["latest"], force=False, client=docker_client)

    assert outcome.pushed_tags == []
    [(tag, reason)] = outcome.refused
    assert tag == "1.0.0"
    assert reason.startswith(f"registry already holds {registry}/{repository}:1.0.0 with a different image (config sha256:")
    assert reason.endswith("version tags are immutable; use --force to overwrite")
    # Neither the version nor the alias moved to the refused image.
    assert remote_digest(registry, repository, "1.0.0") == published.digest
    assert remote_digest(registry, repository, "latest") == published.digest


def test_force_overwrites_a_published_version(registry, repository, tiny_image, docker_client):
    push_image(tiny_image("old"), registry, repository, ["1.0.0"], ["latest"], False, client=docker_client)
    other_id = tiny_image("new")

    outcome = push_image(other_id, registry, repository, ["1.0.0"], ["latest"], force=True, client=docker_client)

    assert outcome.pushed_tags == ["1.0.0", "latest"]
    assert remote_digest(registry, repository, "1.0.0") == outcome.digest
    assert docker_client.images.pull(f"{registry}/{repository}@{outcome.digest}").id == other_id


def test_alias_moves_to_each_new_version(registry, repository, tiny_image, docker_client):
    old = push_image(tiny_image("v1"), registry, repository, ["2.0.0"], ["cu12.4", "latest"], False, client=docker_client)

    new = push_image(tiny_image("v2"), registry, repository, ["2.0.1"], ["cu12.4", "latest"], False, client=docker_client)

    assert new.digest != old.digest
    assert remote_digest(registry, repository, "2.0.0") == old.digest
    assert remote_digest(registry, repository, "cu12.4") == new.digest
    assert remote_digest(registry, repository, "latest") == new.digest


def test_pushing_a_missing_local_image_is_a_clear_error(registry, repository, docker_client):
    with pytest.raises(RegistryError, match="no local image imagegen-test/absent:x; build it first"):
        push_image("imagegen-test/absent:x", registry, repository, ["1"], [], False, client=docker_client)


def test_unreachable_registry_is_a_clear_error():
    with pytest.raises(RegistryError, match="cannot reach registry at http://127.0.0.1:9/"):
        remote_digest("127.0.0.1:9", "imagegen-test/x", "1")


def test_registry_may_carry_a_namespace(registry, repository, tiny_image, docker_client):
    namespace, name = repository.split("/", 1)

    outcome = push_image(tiny_image("ns"), f"{registry}/{namespace}", name, ["1.0.0"], [], False, client=docker_client)

    assert outcome.pushed_tags == ["1.0.0"]
    assert remote_digest(registry, repository, "1.0.0") == outcome.digest
    assert remote_digest(f"{registry}/{namespace}", name, "1.0.0") == outcome.digest


def test_force_with_the_same_image_already_there_pushes_nothing(registry, repository, tiny_image, docker_client):
    image_id = tiny_image("same-forced")
    push_image(image_id, registry, repository, ["1.0.0"], [], False, client=docker_client)

    outcome = push_image(image_id, registry, repository, ["1.0.0"], [], force=True, client=docker_client)

    assert (outcome.already_published, outcome.pushed_tags) == (["1.0.0"], [])
    assert outcome.digest == remote_digest(registry, repository, "1.0.0")


def test_errors_inside_the_push_stream_are_raised(tiny_image, docker_client):
    # Only an alias, so no manifest lookup runs first: the failure comes from the push stream.
    unreachable = "127.0.0.1:9"
    name = unique_name("imagegen-test/unreachable")
    try:
        with pytest.raises(RegistryError, match=f"push of {unreachable}/{name}:latest failed: .*connection refused"):
            push_image(tiny_image("unreachable"), unreachable, name, [], ["latest"], False, client=docker_client)
    finally:
        docker_client.images.remove(f"{unreachable}/{name}:latest")
