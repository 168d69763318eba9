"""The comparisons `imagegen test` makes between what an image reports and its tag and labels."""

import pytest

from imagegen.core import platforms
from imagegen.stages import smoke

INSIDE = {"vlmgrpo": "0.1.0", "torch": "2.6.0+cu124", "torch_cuda": "12.4", "cudnn": "9.1.0",
          "python": "3.11.9", "nccl": "2.21.5"}
INPUTS = "sha256:3f2a9c1d4e5b" + "0" * 52
TAG = "0.1.0-torch2.6.0-cu124-cudnn9-py3.11-3f2a9c1d4e5b"


@pytest.mark.parametrize("label, inside, wanted, same", [
    ("torch", "2.6.0+cu124", "2.6.0", True),
    ("torch", "2.6.1", "2.6.0", False),
    ("cudnn", "9.1.0", "9.1.0.70", True),
    ("cudnn", "9.5.1", "9.1.0.70", False),
    ("python", "3.11.9", "3.11", True),
    ("python", "3.12.1", "3.11", False),
    ("flash-attn", None, "none", True),
    ("flash-attn", "2.8.3", "none", False),
    ("deepspeed", None, "0.19.8", False),
])
def test_versions_inside_against_labels(label, inside, wanted, same):
    assert smoke._same_version(label, inside, wanted) is same


def facts(label, tags=(), inputs=INPUTS):
    labels = {"org.opencontainers.image.version": label} if label else {}
    return {"labels": {**labels, "io.imagegen.inputs": inputs}, "tags": [f"repo:{tag}" for tag in tags]}


def test_a_tag_rebuilt_from_the_inside_passes():
    assert smoke._tag_matches_inside(facts(TAG, [TAG, "cu12.4"]), INSIDE).status == "pass"
    runtime = "0.1.0-torch2.6.0-cu124-cudnn9-py3.11-runtime-3f2a9c1d4e5b"
    assert smoke._tag_matches_inside(facts(runtime), INSIDE).status == "pass"


def test_a_platform_images_local_tag_carries_its_arch_after_the_version_tag():
    assert smoke._tag_matches_inside(facts(TAG, [TAG + "-arm64", "cpu-arm64"]), INSIDE).status == "pass"


@pytest.mark.parametrize("platform", sorted(platforms.ARCH))
def test_a_platform_tag_comes_back_to_its_version_tag(platform):
    assert platforms.without_arch(platforms.arch_tag(TAG, platform)) == TAG
    assert platforms.without_arch(TAG + platforms.suffix(platform)) == TAG
    assert platforms.without_arch("cpu" + platforms.suffix(platform)) == "cpu"
    assert platforms.without_arch(TAG) == TAG


def test_a_tag_that_lies_about_torch_fails():
    check = smoke._tag_matches_inside(facts("0.1.0-torch2.7.1-cu124-cudnn9-py3.11-3f2a9c1d4e5b"), INSIDE)
    assert check.status == "fail" and "holds 0.1.0-torch2.6.0-cu124-cudnn9-py3.11" in check.detail


def test_a_second_version_tag_that_lies_fails_too():
    check = smoke._tag_matches_inside(facts(TAG, [TAG, "0.1.0-torch2.6.0-cu126-cudnn9-py3.11-3f2a9c1d4e5b"]),
                                      INSIDE)
    assert check.status == "fail" and "cu126" in check.detail


def test_a_tag_whose_digest_is_not_the_images_inputs_fails():
    check = smoke._tag_matches_inside(facts(TAG, inputs="sha256:" + "9" * 64), INSIDE)
    assert check.status == "fail" and "does not end in the digest of the inputs" in check.detail


def test_an_image_without_labels_fails_with_the_reason():
    check = smoke._tag_matches_inside(facts(None), INSIDE)
    assert check.status == "fail" and "no org.opencontainers.image.version label" in check.detail


@pytest.mark.parametrize("user, status", [("", "fail"), ("root", "fail"), ("0:0", "fail"), ("1000:1000", "pass"),
                                          ("trainer", "pass")])
def test_the_image_user_must_not_be_root(user, status):
    assert smoke._runs_as_non_root(user).status == status


def test_every_shared_library_must_be_built_for_the_images_platform():
    ok = smoke._libraries_are_for("linux/arm64", {"183": ["/opt/venv/a.so", "/opt/venv/b.so"]})
    assert ok.status == "pass" and ok.detail == "all 2 shared libraries in the environment are linux/arm64"
    mixed = smoke._libraries_are_for("linux/arm64", {"183": ["/opt/venv/a.so"], "62": ["/opt/venv/x86.so"]})
    assert mixed.status == "fail" and "1 of 2" in mixed.detail and "/opt/venv/x86.so" in mixed.detail
    assert smoke._libraries_are_for("linux/amd64", {}).status == "fail"  # none found is no proof
