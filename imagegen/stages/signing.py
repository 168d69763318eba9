"""Signatures of pushed digests, as cosign writes them with a key, so that `cosign verify --key KEY.pub
--insecure-ignore-tlog` (and `imagegen verify --key`) checks them: a "simple signing" payload naming the repository and
the digest, its ECDSA signature (SHA-256, DER, base64) in the annotation dev.cosignproject.cosign/signature of the
payload's layer, in a manifest under the tag `sha256-<hex>.sig` of the same repository. cosign's documentation says how
another tool checks one ("Download the signatures to verify with another tool": the payload, the signature, openssl).

Keys are PEM: an EC private key (P-256, PKCS#8 or SEC1, as `openssl ecparam -genkey -name prime256v1` writes it and
`cosign import-key-pair` takes it; an encrypted one takes its password from COSIGN_PASSWORD), and its public key
(cosign.pub's form) for verify. Keyless signing (an OIDC identity, Fulcio, Rekor) is not here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from imagegen.core.errors import UserError
from imagegen.engine.registry.http import RegistryClient, check

PAYLOAD_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
SIGNATURE_TYPE = "cosign container image signature"
PASSWORD_VARIABLE = "COSIGN_PASSWORD"


def payload(name: str, digest: str) -> bytes:
    """What is signed: the repository (registry/repository) and the manifest digest, as cosign writes it."""
    return json.dumps({"critical": {"identity": {"docker-reference": name},
                                    "image": {"docker-manifest-digest": digest}, "type": SIGNATURE_TYPE},
                       "optional": None}, separators=(",", ":")).encode()


def private_key(path: Path):
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    password = os.environ.get(PASSWORD_VARIABLE)
    try:
        key = load_pem_private_key(path.read_bytes(), password.encode() if password else None)
    except (OSError, ValueError, TypeError) as error:
        raise UserError(f"--sign-key {path}: not a PEM private key imagegen can read ({error}); an encrypted one takes "
                        f"its password from {PASSWORD_VARIABLE}") from None
    return key


def public_key(path: Path):
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        return load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as error:
        raise UserError(f"--key {path}: not a PEM public key ({error})") from None


def sign(data: bytes, key) -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise UserError("--sign-key: an EC key is needed (P-256, as `cosign generate-key-pair` makes)")
    return base64.b64encode(key.sign(data, ec.ECDSA(hashes.SHA256()))).decode()


def signed_by(data: bytes, signature: str, key) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key.verify(base64.b64decode(signature), data, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def signature_tag(digest: str) -> str:
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}-{value}.sig"


def attach(remote: RegistryClient, repository: str, name: str, digest: str, key) -> str:
    """Sign `digest` and put the signature under its .sig tag (replacing an earlier one); the signature's digest."""
    data = payload(name, digest)
    layer = _blob(remote, repository, data, PAYLOAD_TYPE)
    layer["annotations"] = {SIGNATURE_ANNOTATION: sign(data, key)}
    config = json.dumps({"architecture": "", "os": "", "config": {}, "rootfs": {
        "type": "layers", "diff_ids": [layer["digest"]]}}, separators=(",", ":")).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _blob(remote, repository, config, OCI_CONFIG),
                "layers": [layer]}
    body = json.dumps(manifest, separators=(",", ":")).encode()
    url = f"{remote.base_url}/v2/{remote.path(repository)}/manifests/{signature_tag(digest)}"
    check(remote.request("PUT", url, data=body, headers={"Content-Type": OCI_MANIFEST}), f"PUT {url}")
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Signature:
    payload: bytes
    signature: str


def signatures(remote: RegistryClient, repository: str, digest: str) -> list[Signature]:
    """The signatures under the digest's .sig tag, each with the payload it signs; [] when there are none."""
    found = remote.manifest(repository, signature_tag(digest))
    if found is None:
        return []
    layers = json.loads(found.body).get("layers", [])
    return [Signature(remote.blob(repository, layer["digest"]),
                      layer.get("annotations", {}).get(SIGNATURE_ANNOTATION, "")) for layer in layers]


def problems(remote: RegistryClient, repository: str, digest: str, key) -> list[str]:
    """Why `digest` carries no signature by `key` over a payload naming it; [] when it does."""
    found = signatures(remote, repository, digest)
    if not found:
        return ["not signed (no signature under its .sig tag)"]
    named = [s for s in found if _names(s.payload, digest)]
    if not named:
        return ["its signature names another digest"]
    if not any(signed_by(s.payload, s.signature, key) for s in named):
        return ["signed, but not by the given key"]
    return []


def _names(data: bytes, digest: str) -> bool:
    try:
        return json.loads(data)["critical"]["image"]["docker-manifest-digest"] == digest
    except (ValueError, KeyError, TypeError):
        return False


def _blob(remote: RegistryClient, repository: str, data: bytes, media_type: str) -> dict:
    """`data` uploaded as a blob through oras-py, as oci.attach_artifact uploads; its descriptor."""
    descriptor = {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "blob"
        path.write_bytes(data)
        check(remote.oras.upload_blob(str(path), remote.container(repository, "signature"), descriptor),
              f"upload of {descriptor['digest']}")
    return descriptor
