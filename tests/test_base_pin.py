"""Base images pinned by digest, against a real registry: the lock records what the tag points to,
a build goes FROM that digest even after the tag moved, and says what to do once the digest is gone."""

from __future__ import annotations

import json
import urllib.request

from imagegen.stages import build
from imagegen.render import contexts as render
from imagegen.engine.registry.http import remote_digest
from imagegen.workspace import Workspace
from tests.docker_env import unique_name
from tests.helpers import FIXTURE_TRAINER, image_named, locked_matrix
from tests.test_cli import imagegen, on


def push(docker_client, image: str, ref: str) -> str:
    repository, tag = ref.rsplit(":", 1)
    docker_client.images.get(image).tag(repository, tag)
    for line in docker_client.images.push(repository, tag, stream=True, decode=True):
        assert "error" not in line, line
    docker_client.images.remove(ref)  # the build must fetch it from the registry
    return remote_digest(*repository.split("/", 1), tag)


def build_base_layer(build_client, matrix, throwaway_tag, directory):
    cpu = Workspace(matrix, trainer=FIXTURE_TRAINER).load().locked["cpu"]
    base = cpu.contexts[0]
    render.write_files(directory, base.files)
    lines: list[str] = []
    outcome = build_client.build(directory, [throwaway_tag("base-pin")], lines.append)
    return cpu, base, outcome


def test_the_lock_pins_the_base_digest_and_a_build_keeps_to_it(registry, docker_client, local_base_image,
                                                                 build_client, throwaway_tag, tmp_path):
    ref = f"{registry}/{unique_name('imagegen-test/debian')}:bookworm"
    pinned = push(docker_client, local_base_image, ref)
    matrix = locked_matrix(tmp_path, lambda d: image_named(d, "cpu").update(base=ref))

    locked = imagegen("lock", *on(matrix), "--image", "cpu")
    assert locked.returncode == 0, locked.stderr
    lock = json.loads((tmp_path / "locks" / "cpu.json").read_text())["platforms"]["linux/amd64"]
    assert lock["base"] == {"ref": ref, "digest": pinned, "note": ""}
    assert f"base {ref}@{pinned}" in locked.stdout

    # The tag moves upstream to another image; the build still starts from the locked digest.
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "Dockerfile").write_text(f"FROM {local_base_image}\nRUN touch /moved-upstream\n")
    other = build_client.build(moved, [throwaway_tag("moved")], lambda _: None)
    assert other.ok and push(docker_client, other.image_id, ref) != pinned
    cpu, base, outcome = build_base_layer(build_client, matrix, throwaway_tag, tmp_path / "context")
    assert base.dockerfile.splitlines()[3] == f"FROM {ref}@{pinned}"
    assert outcome.ok, outcome.log_tail
    files = docker_client.containers.run(outcome.image_id, ["ls", "/"], remove=True).decode().split()
    assert "moved-upstream" not in files and "opt" in files



def test_a_locked_base_digest_the_registry_dropped_fails_the_build_with_what_to_do(
        registry, docker_client, local_base_image, build_client, throwaway_tag, tmp_path):
    """A digest this engine never pulled (a new machine) and the registry no longer has: NVIDIA deletes
    the tags of toolkits past their end of life."""
    unique = tmp_path / "unique"
    unique.mkdir()
    (unique / "Dockerfile").write_text(f"FROM {local_base_image}\nRUN echo {unique_name('base')} > /unique\n")
    made = build_client.build(unique, [throwaway_tag("unique-base")], lambda _: None)
    ref = f"{registry}/{unique_name('imagegen-test/debian')}:bookworm"
    pinned = push(docker_client, made.image_id, ref)
    matrix = locked_matrix(tmp_path, lambda d: image_named(d, "cpu").update(base=ref))
    assert imagegen("lock", *on(matrix), "--image", "cpu").returncode == 0
    host, repository = ref.rsplit(":", 1)[0].split("/", 1)
    request = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{pinned}", method="DELETE")
    urllib.request.urlopen(request, timeout=10).close()

    _, base, gone = build_base_layer(build_client, matrix, throwaway_tag, tmp_path / "context")

    assert not gone.ok and "load metadata for" in gone.failed_step
    hint = build.missing_base_hint(build.base_of(base.dockerfile), gone.log_tail)
    assert hint and hint.startswith(f"the base {ref}@{pinned} is no longer in its registry")
    assert "--base-image" in hint and "imagegen lock" in hint
