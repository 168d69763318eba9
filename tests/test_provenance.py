"""The SLSA provenance `imagegen push` attaches (imagegen/stages/provenance.py): its statement as plain data, and
what `imagegen verify` says of a statement that does not describe the image. On the registry:
tests/test_verify.py."""

from __future__ import annotations

import copy

from imagegen.render.tags import INPUTS_LABEL
from imagegen.stages import provenance
from tests.helpers import locked_named

DIGEST = "sha256:" + "d" * 64
REVISION = "a" * 40


def made() -> tuple[dict, dict]:
    image = locked_named("cpu")
    labels = {INPUTS_LABEL: image.inputs_digest, provenance.REVISION_LABEL: REVISION,
              provenance.BUILDER_LABEL: "imagegen 0.1.0 with docker 20.10", provenance.CREATED_LABEL: "2026-12-06"}
    return provenance.statement(image, "registry.example/vlm-grpo", DIGEST, labels), labels


def test_the_statement_is_in_toto_v1_with_an_slsa_v1_predicate_naming_what_the_image_was_built_from():
    said, _ = made()
    image = locked_named("cpu")
    assert said["_type"] == "https://in-toto.io/Statement/v1"
    assert said["predicateType"] == "https://slsa.dev/provenance/v1"
    assert said["subject"] == [{"name": "registry.example/vlm-grpo", "digest": {"sha256": "d" * 64}}]
    definition = said["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["image"] == "cpu"
    assert definition["externalParameters"]["matrix_entry"]["versions"]["torch"] == image.versions["torch"]
    assert definition["internalParameters"] == {"inputs_digest": image.inputs_digest,
                                                "lock_digest": provenance.lock_digest(image)}
    assert definition["resolvedDependencies"][0] == {"uri": "git+source", "digest": {"gitCommit": REVISION}}
    assert said["predicate"]["runDetails"]["builder"]["id"] == "imagegen 0.1.0 with docker 20.10"
    assert provenance.lock_digest(image) != provenance.lock_digest(locked_named("cu124-torch2.6"))


def test_a_statement_of_the_image_has_no_mismatch_and_each_lie_is_one_line():
    said, labels = made()
    assert provenance.mismatches(said, DIGEST, labels) == []
    other_commit = copy.deepcopy(said)
    other_commit["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"] = "b" * 40
    assert provenance.mismatches(other_commit, DIGEST, labels) == [
        f"its provenance names commit {'b' * 40}; the image was built from {REVISION} (its "
        "org.opencontainers.image.revision label)"]
    assert provenance.mismatches(said, "sha256:" + "e" * 64, labels) == [
        f"its provenance is of another image (sha256:{'d' * 64})"]
    other_inputs = {**labels, INPUTS_LABEL: "sha256:" + "0" * 64}
    (line,) = provenance.mismatches(said, DIGEST, other_inputs)
    assert line.startswith("its provenance names inputs sha256:") and line.endswith("0" * 64)
    assert provenance.mismatches({"_type": "x"}, DIGEST, labels) == [
        "its provenance is not an in-toto statement of SLSA provenance v1 (None)"]
