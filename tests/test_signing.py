"""Signatures as cosign writes them with a key (imagegen/stages/signing.py): the payload, an ECDSA signature that
openssl checks as cosign's documentation says another tool does, and keys refused in one line. On the registry:
tests/test_pipeline.py's verify test."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from imagegen.core.errors import UserError
from imagegen.stages import signing

DIGEST = "sha256:" + "c" * 64


def write_key(path: Path, key, password: bytes | None = None) -> Path:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return path


def write_public(path: Path, key) -> Path:
    path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


def test_the_payload_is_cosign_s_simple_signing_form():
    assert json.loads(signing.payload("registry.example/vlm-grpo", DIGEST)) == {
        "critical": {"identity": {"docker-reference": "registry.example/vlm-grpo"},
                     "image": {"docker-manifest-digest": DIGEST}, "type": "cosign container image signature"},
        "optional": None}
    assert signing.signature_tag(DIGEST) == f"sha256-{'c' * 64}.sig"


def test_a_signature_checks_with_its_key_with_openssl_too_and_not_with_another_key(tmp_path):
    key, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    loaded = signing.private_key(write_key(tmp_path / "key.pem", key))
    data = signing.payload("registry.example/vlm-grpo", DIGEST)
    signature = signing.sign(data, loaded)
    public = signing.public_key(write_public(tmp_path / "cosign.pub", key))
    assert signing.signed_by(data, signature, public)
    assert not signing.signed_by(data, signature, other.public_key())
    assert not signing.signed_by(data.replace(b"c", b"d"), signature, public)
    # The check cosign's documentation gives for another tool: the payload, the signature decoded, openssl.
    (tmp_path / "payload.json").write_bytes(data)
    (tmp_path / "signature.der").write_bytes(base64.b64decode(signature))
    checked = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(tmp_path / "cosign.pub"), "-signature",
                              str(tmp_path / "signature.der"), str(tmp_path / "payload.json")],
                             capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout.strip() == "Verified OK", checked.stderr
    write_public(tmp_path / "other.pub", other)
    refused = subprocess.run(["openssl", "dgst", "-sha256", "-verify", str(tmp_path / "other.pub"), "-signature",
                              str(tmp_path / "signature.der"), str(tmp_path / "payload.json")],
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "Verification failure" in refused.stdout + refused.stderr


def test_an_encrypted_key_takes_cosign_s_password_variable(tmp_path, monkeypatch):
    path = write_key(tmp_path / "key.pem", ec.generate_private_key(ec.SECP256R1()), b"s3cret")
    with pytest.raises(UserError, match="COSIGN_PASSWORD"):
        signing.private_key(path)
    monkeypatch.setenv("COSIGN_PASSWORD", "s3cret")
    assert isinstance(signing.private_key(path), ec.EllipticCurvePrivateKey)


def test_keys_it_cannot_sign_with_are_one_line(tmp_path):
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(UserError, match=r"^--sign-key .*junk.pem: not a PEM private key"):
        signing.private_key(tmp_path / "junk.pem")
    rsa_key = signing.private_key(write_key(tmp_path / "rsa.pem", rsa.generate_private_key(65537, 2048)))
    with pytest.raises(UserError, match="an EC key is needed"):
        signing.sign(b"x", rsa_key)
    with pytest.raises(UserError, match=r"^--key .*junk.pem: not a PEM public key"):
        signing.public_key(tmp_path / "junk.pem")
