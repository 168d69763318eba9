"""Resolved specs, tags and labels: derived from what is inside, deterministic, unique."""

import json

from imagegen import tags
from imagegen.select import Selection, choose, version_matches

import pytest

from imagegen.errors import UserError
from tests.helpers import spec_named, specs


def test_cu124_image_resolves_to_its_index_base_and_wheel():
    spec = spec_named("cu124-torch2.6")
    assert spec.base_image == "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    assert spec.torch_index_url == "https://download.pytorch.org/whl/cu124"
    assert spec.python_source == "deadsnakes"
    assert spec.flash_attn_wheel_url.endswith(
        "v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")


def test_cpu_image_takes_torch_from_pypi_with_its_pinned_libraries():
    spec = spec_named("cpu")
    assert spec.torch_index_url is None and spec.base_image == "debian:bookworm-slim"
    assert (spec.torch_cuda, spec.cudnn, spec.nccl) == ("13.0", "9.24.0.43", "2.30.7")
    assert spec.flash_attn is None and spec.deepspeed is None
    assert spec.version_tag == "0.1.0-torch2.14.1-cu130-cudnn9-py3.11-debian12"


def test_version_tag_spells_every_component_users_check():
    assert spec_named("cu124-torch2.6").version_tag == "0.1.0-torch2.6.0-cu124-cudnn9-py3.11"


def test_a_build_override_changes_cudnn():
    assert spec_named("cu128-torch2.7").cudnn == "9.7.1.26"
    assert spec_named("cu126-torch2.7").cudnn == "9.5.1.17"


def test_aliases_move_to_the_newest_torch_per_cuda_and_latest():
    by_name = {spec.name: spec for spec in specs()}
    assert "cu12.8" in by_name["cu128-torch2.8"].alias_tags
    assert "cu12.8" not in by_name["cu128-torch2.7"].alias_tags
    assert "latest" in by_name["cu128-torch2.8"].alias_tags
    assert by_name["cpu"].alias_tags == ("cpu",)
    assert tags.duplicate_tags(specs()) == []


def test_labels_carry_oci_keys_and_one_label_per_component():
    labels = spec_named("cu124-torch2.6").labels
    assert labels["org.opencontainers.image.version"] == "0.1.0-torch2.6.0-cu124-cudnn9-py3.11"
    assert labels["io.imagegen.torch"] == "2.6.0" and labels["io.imagegen.torch.cuda"] == "12.4"
    assert labels["io.imagegen.flash-attn"] == "2.7.4.post1" and labels["io.imagegen.base.cudnn"] == "9"


def test_source_builds_compile_for_ampere_and_newer_only():
    assert spec_named("cu118-torch2.6").cuda_arch_list == "8.0;8.6;8.9;9.0+PTX"


def test_expected_versions_match_the_labels():
    spec = spec_named("cu128-torch2.8")
    expected = spec.expected_versions()
    assert expected["torch"] == spec.labels["io.imagegen.torch"]
    assert expected["cudnn"] == spec.labels["io.imagegen.cudnn"]
    json.dumps(expected)


@pytest.mark.parametrize("wanted, actual, matches", [
    ("12.4", "12.4.1", True), ("12", "12.4.1", True), ("12.4.1", "12.4.1", True),
    ("12.4", "12.40.1", False), ("12.4.0", "12.4.1", False), ("12.4", None, False),
])
def test_version_prefix_matching(wanted, actual, matches):
    assert version_matches(wanted, actual) is matches


def test_selection_combines_with_and():
    chosen = choose(specs(), Selection(cuda="12.8", torch="2.8"))
    assert [s.name for s in chosen] == ["cu128-torch2.8"]
    assert len(choose(specs(), Selection(python="3.12"))) == 4


def test_no_match_lists_what_exists():
    with pytest.raises(UserError) as caught:
        choose(specs(), Selection(cuda="9.9"))
    assert str(caught.value) == ("no image matches --cuda 9.9; CUDA versions: "
                                 "11.8, 12.1, 12.4, 12.6, 12.8, 13.0")


def test_unknown_image_name_lists_the_names():
    with pytest.raises(UserError, match="no image named nope; images: cu118-torch2.6"):
        choose(specs(), Selection(images=("nope",)))


def test_the_framework_layer_gets_the_trainers_dependencies_but_not_the_pinned_ones():
    from packaging.requirements import Requirement

    from imagegen import matrix as matrix_module
    from imagegen import plan
    from tests.helpers import MATRIX_PATH

    trainer = plan.Trainer("0.1.0", (Requirement("transformers>=4.57"), Requirement("click>=8.0"),
                                     Requirement("Pillow")), (Requirement("setuptools>=64"),))
    spec = next(s for s in plan.resolve(matrix_module.read(MATRIX_PATH), trainer) if s.name == "cpu")
    assert spec.trainer_requirements == ("Pillow", "click>=8.0", "setuptools>=64")
