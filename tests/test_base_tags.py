"""`imagegen facts check` asks each base tag's registry whether the tag exists (NVIDIA deletes old nvidia/cuda tags).

The pure parts (which bases the matrix renders, the reference asked for, the message) are unit-tested; a registry
that does not answer is a fact not checked; a present and a missing tag are asked of the loopback registry
(`--base-registry`), where the test pushes a tiny image as nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04. Docker Hub
itself answers in the scheduled locks workflow (`facts check --strict`).
"""

from __future__ import annotations

import pytest
import yaml

from imagegen.facts import bases as facts_bases
from imagegen.locking import index
from imagegen.matrix import model

from tests.helpers import FIXTURE_MATRIX, fixture_data, image_named, write_matrix
from tests.test_base_pin import push
from tests.test_cli import imagegen, on

PRESENT = "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
ABSENT = "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04"


def test_each_base_the_matrix_renders_once_with_its_images_and_where_it_is_set():
    data = fixture_data()
    image_named(data, "cu124-torch2.6")["flavor"] = "runtime"
    matrix = model.parse(yaml.safe_dump(data, sort_keys=False), str(FIXTURE_MATRIX))
    uses = {use.ref: use for use in facts_bases.base_uses(matrix)}
    assert uses["nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"].at == ("cuda", "12.4", "base", "runtime")
    assert uses["nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04"].images == ("cu128-torch2.7", "cu128-torch2.8")
    cpu = next(index for index, image in enumerate(data["images"]) if image["name"] == "cpu")
    assert uses["debian:bookworm-slim"].at == ("images", cpu, "base")
    assert PRESENT not in uses and len(uses) == 7


def test_the_reference_asked_for_is_the_base_s_own_or_the_same_on_another_registry():
    own = facts_bases.asked(PRESENT, None)
    assert (own.host, own.repository, own.tag) == ("docker.io", "nvidia/cuda", "12.4.1-cudnn-devel-ubuntu22.04")
    mirror = facts_bases.asked("debian:bookworm-slim", "127.0.0.1:5000")
    assert (mirror.host, mirror.repository, mirror.tag) == ("127.0.0.1:5000", "library/debian", "bookworm-slim")


def test_a_missing_nvidia_tag_says_which_images_and_what_to_do():
    use = facts_bases.BaseUse(ABSENT, ("cuda", "12.1", "base", "devel"), ("cu121-torch2.5", "other"))
    message = facts_bases.missing_message(use, facts_bases.asked(ABSENT, None))
    assert message.startswith(f"base {ABSENT} of cu121-torch2.5, other: the registry docker.io has no such tag "
                              "(NVIDIA removes old nvidia/cuda tags); set a tag that exists")
    assert "https://hub.docker.com/r/nvidia/cuda/tags" in message and "--base-image REF" in message
    other = facts_bases.BaseUse("debian:bookworm-slim", ("images", 7, "base"), ("cpu",))
    assert "NVIDIA" not in facts_bases.missing_message(other, facts_bases.asked(other.ref, None))


@pytest.fixture
def no_index(monkeypatch):
    """A package index that never answers: what these tests look at is the base registry alone."""
    def project_files(index_url, project):
        raise index.PackageIndexError(f"cannot reach {index_url}: made up")

    monkeypatch.setattr(index, "project_files", project_files)


def bases_matrix(tmp_path, *names: str) -> str:
    """The tests' matrix with these images alone and no torch, package or flash-attn facts: what facts check asks
    is the made-up index, which answers nothing, and the base registry."""
    data = fixture_data()
    data["torch"], data["packages"], data["flash_attn"] = {}, {}, {}
    data["images"] = [image_named(data, name) for name in names]
    return str(write_matrix(tmp_path, data))


def base_lines(result, start: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith(start) and " base " in line]


def test_a_registry_that_does_not_answer_leaves_the_base_not_checked(tmp_path, no_index):
    path = bases_matrix(tmp_path, "cu124-torch2.6")
    result = imagegen("facts", "check", "--base-registry", "127.0.0.1:9", *on(path))  # port 9: nothing listens
    assert result.returncode == 0, result.stderr  # nothing disagrees
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(f"not checked: base {PRESENT}")]
    assert f"not checked: base {PRESENT} (asked of 127.0.0.1:9): cannot reach registry at http://127.0.0.1:9/v2/" \
        in line
    assert base_lines(result, "error:") == []
    strict = imagegen("facts", "check", "--strict", "--base-registry", "127.0.0.1:9", *on(path))
    assert strict.returncode == 1 and "--strict fails while any is not checked" in strict.stdout


def test_a_present_tag_is_checked_and_a_missing_one_fails_naming_image_and_tag(
        tmp_path, no_index, registry, docker_client, local_base_image):
    push(docker_client, local_base_image, f"{registry}/{PRESENT}")
    both = bases_matrix(tmp_path, "cu124-torch2.6", "cu121-torch2.5")
    result = imagegen("facts", "check", "--base-registry", registry, *on(both))
    assert result.returncode == 1, result.stderr
    (error,) = base_lines(result, "error:")
    assert "matrix.yaml:" in error and ": cuda.12.1.base.devel: " in error and error.endswith("[facts]")
    assert f"base {ABSENT} of cu121-torch2.5: the registry {registry} has no such tag (NVIDIA removes" in error
    assert not [line for line in result.stderr.splitlines() if PRESENT in line]  # asked, and there

    present = imagegen("facts", "check", "--base-registry", registry, *on(bases_matrix(tmp_path, "cu124-torch2.6")))
    assert present.returncode == 0, present.stderr
    assert base_lines(present, "error:") == [] and base_lines(present, "not checked:") == []
