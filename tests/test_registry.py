"""Pushes to a real registry (Debian's docker-registry on loopback) through the real engine."""

from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
import uuid

import pytest
import requests

from testbed import registry as loopback
from imagegen.engine.registry.http import Credentials, RegistryError, credentials_for, remote_digest
from imagegen.engine.registry.oci import attach_artifact, referrers
from imagegen.stages.publish import push_image
from tests.docker_env import unique_name


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


@pytest.mark.docker  # a registry, not the engine: the bench serves it the same way, without pytest's fixtures
def test_the_loopback_registry_answers_then_stops(tmp_path):
    if shutil.which("docker-registry") is None:
        pytest.skip("docker-registry is not installed (run .ci/setup-docker)")
    with loopback.serve(tmp_path) as host:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=5) as answer:
            assert answer.status == 200
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{host}/v2/", timeout=5)


def test_a_loopback_registry_that_exits_says_so_at_once(tmp_path):
    with pytest.raises(loopback.RegistryNotServing, match=r"docker-registry exited \(1\)"):
        with loopback.serve(tmp_path, binary="false", timeout_s=60):
            pytest.fail("served")


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


def test_errors_inside_the_push_stream_are_raised(auth_registry, tiny_image, docker_client):
    # Only an alias, so no manifest lookup runs first: the refusal comes from the push stream.
    name = unique_name("imagegen-test/wrong-password")
    wrong = Credentials(auth_registry.username, "not-the-password")
    try:
        with pytest.raises(RegistryError, match=f"push of {auth_registry.host}/{name}:latest failed: .*authentication"):
            push_image(tiny_image("wrong"), auth_registry.host, name, [], ["latest"], False, client=docker_client,
                       credentials=wrong)
    finally:
        docker_client.images.remove(f"{auth_registry.host}/{name}:latest")


# --- a private registry (htpasswd) ----------------------------------------------------------------------------------


def test_private_registry_with_credentials_pushes_and_answers_tag_checks(auth_registry, private_repository,
                                                                        tiny_image, docker_client):
    login = Credentials(auth_registry.username, auth_registry.password)
    image_id = tiny_image("private")

    outcome = push_image(image_id, auth_registry.host, private_repository, ["1.0.0"], ["latest"], False,
                         client=docker_client, credentials=login)
    again = push_image(image_id, auth_registry.host, private_repository, ["1.0.0"], [], False,
                       client=docker_client, credentials=login)

    assert outcome.pushed_tags == ["1.0.0", "latest"]
    assert again.already_published == ["1.0.0"]  # the tag check read the private manifest
    assert remote_digest(auth_registry.host, private_repository, "1.0.0", login) == outcome.digest


def test_private_registry_without_credentials_is_one_line_saying_how_to_log_in(auth_registry, private_repository,
                                                                              tiny_image, docker_client, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))  # no docker login of the user's may answer here
    with pytest.raises(RegistryError) as raised:
        push_image(tiny_image("anonymous"), auth_registry.host, private_repository, ["1.0.0"], [], False,
                   client=docker_client)
    assert str(raised.value) == (
        f"registry {auth_registry.host} asks for a user name and password: it needs credentials; log in with "
        f"`docker login {auth_registry.host}`, or pass --registry-user USER --registry-password-stdin")


def docker_config(directory, content: dict) -> None:
    """What `docker login` writes to $DOCKER_CONFIG/config.json."""
    (directory / "config.json").write_text(json.dumps(content))


def test_credentials_come_from_the_docker_config(auth_registry, private_repository, tiny_image, docker_client,
                                                 tmp_path, monkeypatch):
    token = base64.b64encode(f"{auth_registry.username}:{auth_registry.password}".encode()).decode()
    docker_config(tmp_path, {"auths": {auth_registry.host: {"auth": token}}})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))

    outcome = push_image(tiny_image("config"), auth_registry.host, private_repository, ["1.0.0"], [], False,
                         client=docker_client)

    assert outcome.pushed_tags == ["1.0.0"]
    assert remote_digest(auth_registry.host, private_repository, "1.0.0") == outcome.digest


def test_credentials_come_from_a_credential_helper(auth_registry, tmp_path, monkeypatch):
    """A credential helper is a program `docker-credential-NAME get` that prints the secret for a host."""
    helper = tmp_path / "bin" / "docker-credential-imagegen-test"
    helper.parent.mkdir()
    answer = json.dumps({"ServerURL": auth_registry.host, "Username": auth_registry.username,
                         "Secret": auth_registry.password})
    helper.write_text(f"#!/bin/sh\n[ \"$1\" = get ] || exit 1\ncat > /dev/null\necho '{answer}'\n")
    helper.chmod(0o755)
    docker_config(tmp_path, {"credHelpers": {auth_registry.host: "imagegen-test"}})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")

    assert credentials_for(auth_registry.host) == Credentials(auth_registry.username, auth_registry.password)
    assert remote_digest(auth_registry.host, "imagegen-test/never-pushed", "1") is None  # authenticated: a 404


class FlakyProxy(http.server.BaseHTTPRequestHandler):
    """Answers the first requests with 503 and 429, as an overloaded registry does, then forwards."""

    upstream = ""
    failures = [503, 429]
    seen: list[int] = []

    def do_HEAD(self):
        self.forward()

    do_GET = do_HEAD

    def forward(self):
        if self.failures:
            status = self.failures.pop(0)
            self.seen.append(status)
            self.send_response(status)
            self.send_header("Retry-After", "0")
            self.end_headers()
            return
        request = urllib.request.Request(f"http://{self.upstream}{self.path}", method=self.command,
                                         headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, headers, body = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, body = error.code, error.headers, error.read()
        self.seen.append(status)
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("transfer-encoding", "connection", "date", "server"):
                self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_429_and_5xx_are_retried_with_backoff(registry, repository, tiny_image, docker_client):
    pushed = push_image(tiny_image("flaky"), registry, repository, ["1.0.0"], [], False, client=docker_client)
    FlakyProxy.upstream, FlakyProxy.seen = registry, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyProxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        FlakyProxy.failures = [503, 429]
        proxy = f"127.0.0.1:{server.server_address[1]}"
        assert remote_digest(proxy, repository, "1.0.0") == pushed.digest
    finally:
        server.shutdown()
    assert FlakyProxy.seen == [503, 429, 200, 200]  # /v2/ twice refused, then answered; then the manifest


def test_an_artifact_attached_to_an_image_is_listed_under_the_referrers_fallback_tag(
        auth_registry, private_repository, tiny_image, docker_client, tmp_path):
    login = Credentials(auth_registry.username, auth_registry.password)
    image = push_image(tiny_image("subject"), auth_registry.host, private_repository, ["1.0.0"], [], False,
                       client=docker_client, credentials=login)
    document = tmp_path / "image.cdx.json"
    document.write_text('{"bomFormat": "CycloneDX", "specVersion": "1.6"}\n')

    first = attach_artifact(auth_registry.host, private_repository, image.digest, document, "application/x-test", login)
    second = attach_artifact(auth_registry.host, private_repository, image.digest, document, "text/x-other", login)

    # distribution 2.8 stores a manifest with a subject but has no referrers API; the OCI fallback tag lists them.
    fallback = f"the referrers tag {image.digest.replace(':', '-')}"
    assert (first.found_by, second.found_by) == (fallback, fallback)
    listed = referrers(auth_registry.host, private_repository, image.digest, login)
    assert [(entry["digest"], entry["artifactType"]) for entry in listed] == [
        (first.digest, "application/x-test"), (second.digest, "text/x-other")]
    artifact = requests.get(f"http://{auth_registry.host}/v2/{private_repository}/manifests/{first.digest}",
                            auth=(login.username, login.password),
                            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    assert artifact["subject"]["digest"] == image.digest and artifact["artifactType"] == "application/x-test"
    blob = requests.get(f"http://{auth_registry.host}/v2/{private_repository}/blobs/{artifact['layers'][0]['digest']}",
                        auth=(login.username, login.password))
    assert blob.content == document.read_bytes()
