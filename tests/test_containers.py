"""Running commands in images and listing their files, on the real engine."""

from __future__ import annotations

import pytest

from imagegen.engine.containers import (
    ContainerError,
    exported_file_paths,
    gpu_runtime_available,
    image_facts,
    layer_file_paths,
    run_in_image,
)


@pytest.fixture
def base_alias(docker_client, local_base_image, throwaway_tag):
    """The base image under a tag of this test's own, so its containers can be found."""
    tag = throwaway_tag("base")
    repository, version = tag.rsplit(":", 1)
    docker_client.images.get(local_base_image).tag(repository, version)
    return tag


def containers_of(docker_client, image: str) -> list:
    return docker_client.containers.list(all=True, filters={"ancestor": image})


def test_run_returns_stdout_stderr_and_exit_code_and_removes_the_container(docker_client, base_alias):
    run = run_in_image(
        base_alias, ["sh", "-c", "echo out; echo err >&2; exit 3"], gpu=False, client=docker_client
    )

    assert (run.exit_code, run.stdout, run.stderr, run.timed_out) == (3, "out\n", "err\n", False)
    assert run.duration_s > 0
    assert containers_of(docker_client, base_alias) == []


def test_run_passes_user_env_volumes_and_shm_size(docker_client, base_alias, tmp_path):
    (tmp_path / "note").write_text("from the host\n")
    tmp_path.chmod(0o755)  # pytest makes it owner-only; the container reads it as nobody

    run = run_in_image(
        base_alias,
        ["sh", "-ec", 'id -un; echo "$GREETING"; cat /data/note; df -k /dev/shm | tail -1'],
        gpu=False,
        user="nobody",
        env={"GREETING": "hello"},
        volumes={str(tmp_path): {"bind": "/data", "mode": "ro"}},
        shm_size="128m",
        client=docker_client,
    )

    assert run.exit_code == 0, run.stderr
    user, greeting, note, shm = run.stdout.splitlines()
    assert (user, greeting, note) == ("nobody", "hello", "from the host")
    assert shm.split()[1] == str(128 * 1024)


def test_run_past_its_timeout_is_killed_and_reported(docker_client, base_alias):
    run = run_in_image(base_alias, ["sleep", "60"], gpu=False, timeout_s=1, client=docker_client)

    assert run.timed_out
    assert run.exit_code == 137
    assert run.duration_s < 30
    assert containers_of(docker_client, base_alias) == []


def test_missing_image_is_a_clear_error_not_a_pull(docker_client):
    with pytest.raises(ContainerError, match="no local image imagegen-test/absent:x; build it first"):
        run_in_image("imagegen-test/absent:x", ["true"], gpu=False, client=docker_client)


def test_gpu_availability_is_reported_with_a_reason(docker_client):
    available, reason = gpu_runtime_available(docker_client)

    assert reason
    assert ("nvidia" in reason or "CDI" in reason) if available else reason.startswith("no GPU runtime")


def test_gpu_run_without_a_gpu_runtime_is_refused_before_requesting_one(docker_client, base_alias):
    available, reason = gpu_runtime_available(docker_client)
    if available:
        pytest.skip(f"this engine can give GPUs ({reason})")

    with pytest.raises(ContainerError, match="a GPU was requested but this engine cannot give one: no GPU runtime"):
        run_in_image(base_alias, ["true"], gpu=True, client=docker_client)
    assert containers_of(docker_client, base_alias) == []


def test_exported_files_of_the_base_image(docker_client, base_alias):
    files = exported_file_paths(base_alias, client=docker_client)

    assert "/etc/debian_version" in files
    assert "/usr/bin/apt-get" in files
    assert "/etc" not in files  # directories are not listed
    assert containers_of(docker_client, base_alias) == []


def test_a_file_deleted_in_a_later_layer_is_still_in_an_earlier_one(
    build_client, docker_client, local_base_image, throwaway_tag, tmp_path
):
    (tmp_path / "Dockerfile").write_text(
        f"FROM {local_base_image}\n"
        "LABEL org.imagegen.test=layers\n"
        "USER nobody\n"
        "RUN echo leaked > /tmp/leak.whl\n"
        "RUN rm /tmp/leak.whl\n"
    )
    tag = throwaway_tag("layers")
    outcome = build_client.build(tmp_path, [tag], lambda _: None)
    assert outcome.ok, outcome.log_tail

    layers = layer_file_paths(tag, client=docker_client)
    facts = image_facts(tag, client=docker_client)

    assert "/tmp/leak.whl" not in exported_file_paths(tag, client=docker_client)
    assert [layer.paths for layer in layers[1:]] == [{"/tmp/leak.whl"}, {"/tmp/.wh.leak.whl"}]
    assert "/etc/debian_version" in layers[0].paths
    assert facts["id"] == outcome.image_id
    assert facts["labels"] == {"org.imagegen.test": "layers"}
    assert facts["user"] == "nobody"
    assert [layer["created_by"] for layer in facts["layers"]][-2:] == [
        "RUN /bin/sh -c echo leaked > /tmp/leak.whl # buildkit",
        "RUN /bin/sh -c rm /tmp/leak.whl # buildkit",
    ]
