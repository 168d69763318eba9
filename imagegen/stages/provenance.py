"""Where a pushed image came from, in the form the field reads: an in-toto Statement v1 whose predicate is SLSA
provenance v1 (the shape BuildKit's `--attest type=provenance` writes), attached as an OCI referrer of the image's
digest beside its SBOM; and the check of a pushed image against it (`imagegen verify`).

The statement names the image's digest, the source commit and the builder (the image's own labels, as the build
wrote them), the matrix entry (the image as plain data), the digest of its lock and of its inputs, and the base it was
built on. `verify` reads all of it back from the registry: the image's labels, its referrers, the statement.
With a key (`push --sign-key`, `verify --key`: stages/signing.py) the image and the statement are signed as cosign
signs them; without one, a registry user who can push could replace the statement, which `verify` would accept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from imagegen.engine.registry import oci
from imagegen.engine.registry.http import Credentials, ImageReference, RegistryClient, credentials_for
from imagegen.locking import lockfile
from imagegen.render.locked import LockedImage
from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages import sbom, signing

MEDIA_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://github.com/imagegen/imagegen/blob/main/docs/architecture.md#provenance"
REVISION_LABEL = "org.opencontainers.image.revision"
BUILDER_LABEL = "io.imagegen.builder"
CREATED_LABEL = "org.opencontainers.image.created"


def lock_digest(image: LockedImage) -> str:
    """The digest of what the image's platform lock pins, as its lock file writes it."""
    return "sha256:" + hashlib.sha256(lockfile.dumps([image.lock]).encode()).hexdigest()


def statement(image: LockedImage, name: str, digest: str, labels: dict[str, str]) -> dict:
    """The provenance of `image`, pushed as `name` (registry/repository) at `digest`, built with `labels`."""
    revision, locked = labels.get(REVISION_LABEL), lock_digest(image)
    dependencies = [{"uri": f"imagegen:locks/{image.name}.json#{image.platform}",
                     "digest": {"sha256": locked.removeprefix("sha256:")}}]
    if revision:
        dependencies.insert(0, {"uri": "git+source", "digest": {"gitCommit": revision}})
    if image.lock.base.digest:
        dependencies.append({"uri": f"docker:{image.lock.base.ref}",
                             "digest": {"sha256": image.lock.base.digest.removeprefix("sha256:")}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"image": image.name, "platform": image.platform,
                                       "matrix_entry": image.as_dict()},
                "internalParameters": {"inputs_digest": image.inputs_digest, "lock_digest": locked},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {"builder": {"id": labels.get(BUILDER_LABEL, "imagegen")},
                           "metadata": {"finishedOn": labels.get(CREATED_LABEL, "")}},
        },
    }


def verify(ref: str, credentials: Credentials | None = None, key_path: Path | None = None) -> list[str]:
    """What does not hold of a pushed image (each one line): its SBOM and its provenance refer to it, the provenance
    names this digest, the commit and the inputs its own labels state, and with key_path, both are signed by that
    key. [] when all holds."""
    reference = ImageReference.parse(ref)
    remote = RegistryClient(reference.host, credentials_for(reference.host, credentials))
    manifest = remote.manifest(reference.repository, reference.digest or reference.tag or "latest")
    if manifest is None or manifest.digest is None:
        return [f"{ref}: no such image on {reference.host}"]
    if manifest.config_digest is None:  # an index: each platform image is checked
        members = json.loads(manifest.body).get("manifests", [])
        return [line for member in members
                for line in verify(f"{reference.host}/{reference.repository}@{member['digest']}", credentials,
                                   key_path)]
    labels = remote.labels(reference.repository, manifest)
    where = f"{reference.host}/{reference.repository}@{manifest.digest}"
    if INPUTS_LABEL not in labels:
        return [f"{where}: not an image imagegen built (no {INPUTS_LABEL} label)"]
    found = oci.referrers(reference.host, reference.repository, manifest.digest, credentials)
    kinds = {entry.get("artifactType"): entry for entry in found}
    problems = [] if sbom.MEDIA_TYPE in kinds else [f"{where}: no SBOM refers to it"]
    if MEDIA_TYPE not in kinds:
        return problems + [f"{where}: no provenance refers to it"]
    said = _statement(remote, reference.repository, kinds[MEDIA_TYPE]["digest"])
    problems += [f"{where}: {line}" for line in mismatches(said, manifest.digest, labels)]
    if key_path is not None:
        key = signing.public_key(key_path)
        found = {what: signing.problems(remote, reference.repository, digest, key)
                 for digest, what in ((manifest.digest, "it"), (kinds[MEDIA_TYPE]["digest"], "its provenance"))}
        if found["it"] and found["it"] == found["its provenance"]:  # one cause, one line
            found = {"it and its provenance": found["it"]}
        problems += [f"{where}: {what}: {reason}" for what, reasons in found.items() for reason in reasons]
    return problems


def mismatches(said: dict, digest: str, labels: dict[str, str]) -> list[str]:
    """Where a provenance statement says other than the image it should describe: pure."""
    if said.get("_type") != STATEMENT_TYPE or said.get("predicateType") != PREDICATE_TYPE:
        return [f"its provenance is not an in-toto statement of SLSA provenance v1 ({said.get('predicateType')!r})"]
    found = []
    subjects = [s.get("digest", {}).get("sha256") for s in said.get("subject", [])]
    if digest.removeprefix("sha256:") not in subjects:
        found.append(f"its provenance is of another image ({', '.join(f'sha256:{s}' for s in subjects)})")
    definition = said.get("predicate", {}).get("buildDefinition", {})
    commits = [d.get("digest", {}).get("gitCommit") for d in definition.get("resolvedDependencies", [])
               if "gitCommit" in d.get("digest", {})]
    if labels.get(REVISION_LABEL) and commits != [labels[REVISION_LABEL]]:
        found.append(f"its provenance names commit {', '.join(commits) or 'none'}; the image was built from "
                     f"{labels[REVISION_LABEL]} (its {REVISION_LABEL} label)")
    inputs = definition.get("internalParameters", {}).get("inputs_digest")
    if inputs != labels.get(INPUTS_LABEL):
        found.append(f"its provenance names inputs {inputs}; the image's {INPUTS_LABEL} label says "
                     f"{labels.get(INPUTS_LABEL)}")
    return found


def _statement(remote: RegistryClient, repository: str, artifact_digest: str) -> dict:
    artifact = remote.manifest(repository, artifact_digest)
    return json.loads(remote.blob(repository, json.loads(artifact.body)["layers"][0]["digest"]))
