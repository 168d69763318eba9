"""`imagegen verify` on the registry (imagegen/stages/provenance.py, signing.py): the cpu image `imagegen push`
published with its SBOM, provenance and signatures (the session's cpu_published), and images pushed otherwise."""

from __future__ import annotations

import io
import json

from cryptography.hazmat.primitives.asymmetric import ec
import pytest

from imagegen.engine.registry.http import Credentials
from imagegen.engine.registry.oci import attach_artifact
from imagegen.stages import provenance, sbom
from tests.conftest import imagegen, read_report
from tests.helpers import locked_named
from tests.test_signing import write_public

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_verify_passes_on_the_pushed_image_and_fails_in_one_line_on_one_pushed_otherwise(
        cpu_image, cpu_published, auth_registry, docker_client, local_base_image, tmp_path):
    """`imagegen verify` on the index push published (both platform images), then on images pushed by `docker push`:
    a foreign one, one with imagegen's labels but nothing attached, and that one with an SBOM and the cpu image's
    provenance naming another commit."""
    assert cpu_published["result"].returncode == 0, cpu_published["result"].stderr[-2000:]
    login = Credentials(auth_registry.username, auth_registry.password)

    def verify(ref, *options):
        return imagegen("verify", f"{auth_registry.host}/{ref}", *options, "--registry-user", login.username,
                        "--registry-password-stdin", stdin=login.password + "\n")

    version_tag = cpu_image["ref"].rsplit(":", 1)[1]
    ok = verify(f"vlm-grpo:{version_tag}", "--key", str(cpu_published["work"] / "cosign.pub"))
    assert ok.returncode == 0 and "error" not in ok.stderr, ok.stderr
    write_public(tmp_path / "other.pub", ec.generate_private_key(ec.SECP256R1()))
    (amd64,) = [r for r in read_report(cpu_published["work"] / "push.json") if r["platform"] == "linux/amd64"]
    assert verify(f"vlm-grpo@{amd64['digest']}", "--key", str(tmp_path / "other.pub")).stderr.splitlines() == [
        f"error: {auth_registry.host}/vlm-grpo@{amd64['digest']}: it and its provenance: signed, but not by the given "
        "key"]
    labels = docker_client.images.get(cpu_image["id"]).labels
    kept = {k: v for k, v in labels.items() if k in ("io.imagegen.inputs", "org.opencontainers.image.revision")}
    pushed = {name: _pushed(docker_client, auth_registry.host, login, name, image_labels, local_base_image)
              for name, image_labels in (("foreign", {}), ("plain", kept))}
    assert verify("vlm-grpo:foreign").stderr.splitlines() == [
        f"error: {auth_registry.host}/vlm-grpo@{pushed['foreign']}: not an image imagegen built (no io.imagegen.inputs "
        "label)"]
    bare = f"error: {auth_registry.host}/vlm-grpo@{pushed['plain']}: "
    assert verify("vlm-grpo:plain").stderr.splitlines() == [bare + "no SBOM refers to it",
                                                            bare + "no provenance refers to it"]
    revision = kept["org.opencontainers.image.revision"]
    said = provenance.statement(locked_named("cpu"), "x", pushed["plain"], {provenance.REVISION_LABEL: "b" * 40})
    said["predicate"]["buildDefinition"]["internalParameters"]["inputs_digest"] = kept["io.imagegen.inputs"]
    (tmp_path / "p.json").write_text(json.dumps(said))
    (tmp_path / "s.json").write_text("{}")
    for path, kind in ((tmp_path / "p.json", provenance.MEDIA_TYPE), (tmp_path / "s.json", sbom.MEDIA_TYPE)):
        attach_artifact(auth_registry.host, "vlm-grpo", pushed["plain"], path, kind, login)
    assert amd64["provenance_digest"] and verify("vlm-grpo:plain").stderr.splitlines() == [
        bare + f"its provenance names commit {'b' * 40}; the image was built from {revision} (its "
        "org.opencontainers.image.revision label)"]


def _pushed(docker_client, host: str, login: Credentials, tag: str, labels: dict, base: str) -> str:
    """An image of the base with these labels, pushed by `docker push` as vlm-grpo:TAG: its digest."""
    # rm, forcerm: docker-py's build keeps its intermediate containers otherwise (other tests count containers)
    docker_client.images.build(fileobj=io.BytesIO(f"FROM {base}\n".encode()), labels=labels,
                               tag=f"{host}/vlm-grpo:{tag}", rm=True, forcerm=True)
    digest = None
    try:
        for line in docker_client.images.push(f"{host}/vlm-grpo", tag, stream=True, decode=True,
                                              auth_config={"username": login.username, "password": login.password}):
            assert "error" not in line, line
            digest = line.get("aux", {}).get("Digest") or digest
    finally:
        docker_client.images.remove(f"{host}/vlm-grpo:{tag}")
    return digest
