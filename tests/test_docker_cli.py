"""BuildKit builds through the real docker CLI and engine."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from imagegen.engine.containers import exported_file_paths, image_facts, layer_file_paths
from imagegen.engine.buildkit import BuildClientError, find_build_client
from tests.helpers import REPO
SECRET_VALUE = "s3cret-value-never-in-a-layer"


def write_context(directory: Path, dockerfile: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "Dockerfile").write_text(dockerfile)
    return directory


def test_a_buildkit_client_is_found_and_says_why(build_client):
    if build_client.uses_buildx:
        assert build_client.why.startswith("docker buildx")
    else:
        assert "accepts DOCKER_BUILDKIT=1" in build_client.why
        assert build_client.env == {"DOCKER_BUILDKIT": "1"}


def test_secret_mount_is_readable_in_run_and_absent_from_the_image(
    build_client, local_base_image, throwaway_tag, tmp_path, docker_client
):
    context = write_context(
        tmp_path / "context",
        f"FROM {local_base_image}\n"
        "RUN --mount=type=secret,id=token "
        f'test "$(cat /run/secrets/token)" = "{SECRET_VALUE}" && echo {uuid.uuid4().hex} > /secret-was-read\n',
    )
    secret = tmp_path / "outside-context" / "token"
    secret.parent.mkdir()
    secret.write_text(SECRET_VALUE)
    lines: list[str] = []
    tag = throwaway_tag("secret")

    outcome = build_client.build(context, [tag], lines.append, secrets={"token": secret})

    assert outcome.ok, outcome.log_tail
    assert outcome.image_id == docker_client.images.get(tag).id
    assert any("RUN --mount=type=secret" in line for line in lines), "output was not streamed to log"
    files = exported_file_paths(tag, client=docker_client)
    assert "/secret-was-read" in files
    assert "/run/secrets/token" not in files
    layer_paths = set().union(*(layer.paths for layer in layer_file_paths(tag, client=docker_client)))
    assert not any(path.endswith("/token") for path in layer_paths)


def test_second_identical_build_comes_entirely_from_cache(
    build_client, local_base_image, throwaway_tag, tmp_path, docker_client
):
    context = write_context(
        tmp_path,
        f"FROM {local_base_image}\n"
        "ARG FLAVOUR\n"
        f"RUN echo {uuid.uuid4().hex} $FLAVOUR > /marker\n"
        "RUN cp /marker /marker.copy\n",
    )
    tag = throwaway_tag("cache")

    def build():
        return build_client.build(context, [tag], lambda _: None, dockerfile=context / "Dockerfile",
                                  build_args={"FLAVOUR": "cpu"}, labels={"org.imagegen.test": "cache"})

    first, second = build(), build()

    assert first.ok and second.ok
    assert (first.cached_steps, first.total_steps) == (0, 2)
    assert (second.cached_steps, second.total_steps) == (2, 2)
    assert second.fully_cached and not first.fully_cached
    assert second.image_id == first.image_id
    assert image_facts(tag, client=docker_client)["labels"] == {"org.imagegen.test": "cache"}


def test_host_ca_bundle_as_a_secret_is_usable_and_leaves_no_trace(
    build_client, local_base_image, ca_bundle, throwaway_tag, tmp_path, docker_client
):
    # The way builds reach PyPI through the TLS-intercepting proxy without baking its CA in.
    context = write_context(
        tmp_path,
        f"FROM {local_base_image}\n"
        "RUN --mount=type=secret,id=ca,target=/run/proxy-ca.crt "
        f"grep -c 'BEGIN CERTIFICATE' /run/proxy-ca.crt > /ca-count-{uuid.uuid4().hex[:8]}\n",
    )
    tag = throwaway_tag("ca")

    outcome = build_client.build(context, [tag], lambda _: None, secrets={"ca": ca_bundle})

    assert outcome.ok, outcome.log_tail
    layer_paths = set().union(*(layer.paths for layer in layer_file_paths(tag, client=docker_client)))
    assert "/run/proxy-ca.crt" not in layer_paths
    assert any(path.startswith("/ca-count-") for path in layer_paths)


def test_target_stops_at_the_named_stage(build_client, local_base_image, throwaway_tag, tmp_path, docker_client):
    context = write_context(
        tmp_path,
        f"FROM {local_base_image} AS first\n"
        f"RUN echo {uuid.uuid4().hex} > /first\n"
        "FROM first AS second\n"
        "RUN touch /second\n",
    )
    tag = throwaway_tag("target")

    outcome = build_client.build(context, [tag], lambda _: None, target="first")

    assert outcome.ok, outcome.log_tail
    assert outcome.total_steps == 1
    files = exported_file_paths(tag, client=docker_client)
    assert "/first" in files and "/second" not in files


def test_failing_run_reports_the_step_and_the_error(build_client, local_base_image, throwaway_tag, tmp_path):
    marker = f"boom-{uuid.uuid4().hex}"
    context = write_context(tmp_path, f"FROM {local_base_image}\nRUN echo {marker} >&2 && exit 7\n")

    outcome = build_client.build(context, [throwaway_tag("failing")], lambda _: None)

    assert not outcome.ok
    assert outcome.image_id is None
    assert outcome.failed_step == f"[2/2] RUN echo {marker} >&2 && exit 7"
    tail = "\n".join(outcome.log_tail)
    assert marker in tail
    assert "exit code: 7" in tail


def test_missing_build_secret_file_is_a_clear_error(build_client, tmp_path):
    context = write_context(tmp_path, "FROM scratch\n")
    with pytest.raises(BuildClientError, match="build secret 'token': no file at"):
        build_client.build(context, [], lambda _: None, secrets={"token": tmp_path / "absent"})


def test_preferred_client_that_does_not_exist_is_named_in_the_error(docker_client):
    with pytest.raises(BuildClientError, match="/nonexistent/docker") as raised:
        find_build_client("/nonexistent/docker")
    assert "not found" in str(raised.value)


def test_client_from_environment_variable_is_honoured(docker_client, monkeypatch):
    monkeypatch.setenv("IMAGEGEN_DOCKER", "/nonexistent/env-docker")
    with pytest.raises(BuildClientError, match="/nonexistent/env-docker"):
        find_build_client()


def test_builder_needs_buildx(docker_client):
    with pytest.raises(BuildClientError, match="imagegen-no-such-builder"):
        find_build_client(builder="imagegen-no-such-builder")


def test_an_engine_older_than_20_10_is_refused_at_start_in_one_line():
    from imagegen.engine.buildkit import SUPPORTED_ENGINES, engine_refusal

    assert engine_refusal("19.03.15") == (
        "the Docker Engine here is 19.03.15: imagegen supports Docker Engine 20.10 or newer (its BuildKit builds the "
        "templates' cache and bind mounts); upgrade the engine")
    for version in ("20.10.24+dfsg1", "26.1.5+dfsg1", "29.0.1", "", "unknown"):
        assert engine_refusal(version) is None, version
    assert f"imagegen supports {SUPPORTED_ENGINES}" in (REPO / "README.md").read_text()
