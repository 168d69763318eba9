"""Resolved specs, tags and labels: derived from what is inside, deterministic, unique."""

import json
import re
from dataclasses import replace

from imagegen.matrix import plan
from imagegen.matrix.components import COMPONENTS
from imagegen.matrix.select import Selection, choose, version_matches

import pytest

from imagegen.core.errors import UserError
from tests.helpers import REPO, spec_named, specs


def test_torch_comes_from_pypi_when_pypi_serves_that_very_build():
    spec = spec_named("cu124-torch2.6")
    assert spec.base_image == "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    assert spec.torch_index_url is None  # PyPI's torch 2.6.0 is the CUDA 12.4 build
    assert spec.python_source == "deadsnakes" and spec.python_platform == "x86_64-manylinux_2_35"
    assert spec.flash_attn_wheel_url.endswith(
        "v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")
    other = spec_named("cu128-torch2.7")
    assert other.torch_index_url == "https://download.pytorch.org/whl/cu128"
    assert "torch==2.7.1+cu128" in plan.resolution_requirements(other)


def test_cpu_image_takes_torch_from_pypi_with_the_libraries_its_lock_pins():
    spec = spec_named("cpu")
    assert spec.torch_index_url is None and spec.base_image == "debian:bookworm-slim"
    assert (spec.torch_cuda, spec.cudnn, spec.nccl) == ("13.0", spec.lock.package("nvidia-cudnn-cu13").version,
                                                        spec.lock.package("nvidia-nccl-cu13").version)
    assert spec.flash_attn is None and spec.deepspeed is None


def test_the_version_tag_spells_what_is_inside_and_ends_in_the_inputs_digest():
    spec = spec_named("cpu")
    digest = spec.inputs_digest.removeprefix("sha256:")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert spec.version_tag == f"0.1.0-torch2.14.1-cu130-cudnn9-py3.11-debian12-{digest[:12]}"
    assert spec_named("cu124-torch2.6").version_tag.startswith("0.1.0-torch2.6.0-cu124-cudnn9-py3.11-")


def test_an_image_without_a_lock_has_no_version_tag_and_says_how_to_make_one():
    spec = next(s for s in specs() if s.lock is None)
    assert spec.version_tag is None and spec.labels == {} and spec.inputs_digest is None
    assert f"imagegen lock --image {spec.name}" in spec.lock_problem


def test_cudnn_and_nccl_come_from_the_lock_not_the_typed_facts():
    spec = spec_named("cu126-torch2.7")
    assert spec.cudnn == spec.lock.family_version("nvidia-cudnn-cu")
    fake = replace(spec.lock, packages=tuple(replace(p, version="9.99.0.1") if p.name == "nvidia-cudnn-cu12" else p
                                             for p in spec.lock.packages))
    assert plan.with_lock(spec, fake).cudnn == "9.99.0.1"


def test_aliases_move_to_the_newest_torch_per_cuda_and_latest():
    by_name = {spec.name: spec for spec in specs()}
    assert "cu12.8" in by_name["cu128-torch2.8"].alias_tags
    assert "cu12.8" not in by_name["cu128-torch2.7"].alias_tags
    assert "latest" in by_name["cu128-torch2.8"].alias_tags
    assert by_name["cpu"].alias_tags == ("cpu",)


def test_labels_carry_oci_keys_one_label_per_component_and_the_inputs():
    spec = spec_named("cu124-torch2.6")
    labels = spec.labels
    assert labels["org.opencontainers.image.version"] == spec.version_tag
    assert labels["io.imagegen.torch"] == "2.6.0" and labels["io.imagegen.torch.cuda"] == "12.4"
    assert labels["io.imagegen.flash-attn"] == "2.7.4.post1" and labels["io.imagegen.base.cudnn"] == "9"
    assert labels["io.imagegen.inputs"] == spec.inputs_digest
    assert {f"io.imagegen.{c.label}" for c in COMPONENTS} <= set(labels)


def test_source_builds_compile_for_ampere_and_newer_only():
    assert spec_named("cu118-torch2.6").cuda_arch_list == "8.0;8.6;8.9;9.0+PTX"


def test_expected_versions_match_the_labels_and_name_each_distribution():
    spec = spec_named("cu128-torch2.8")
    expected = spec.expected()
    for component in COMPONENTS:
        assert (expected["versions"][component.key] or "none") == spec.labels[f"io.imagegen.{component.label}"]
    assert expected["distributions"]["flash_attn"] == "flash-attn"
    json.dumps(expected)


def test_the_lock_resolves_the_pins_the_trainers_needs_flash_attns_needs_and_build_tools():
    spec = spec_named("cu130-torch2.11")
    wanted = plan.resolution_requirements(spec)
    assert {"torch==2.11.0", "torchvision==0.26.0", f"transformers=={spec.transformers}", "einops",
            "deepspeed==0.19.8", "ninja", "setuptools"} <= set(wanted)
    assert not any(line.startswith("flash-attn") for line in wanted)  # locked as an artifact
    assert plan.lock_inputs(spec)["flash_attn"]["requirement"] == "flash-attn==2.8.3"


@pytest.mark.parametrize("wanted, actual, matches", [
    ("12.4", "12.4.1", True), ("12", "12.4.1", True), ("12.4.1", "12.4.1", True),
    ("12.4", "12.40.1", False), ("12.4.0", "12.4.1", False), ("12.4", None, False),
])
def test_version_prefix_matching(wanted, actual, matches):
    assert version_matches(wanted, actual) is matches


def test_selection_combines_with_and():
    chosen = choose(specs(), Selection(cuda="12.8", torch="2.8"))
    assert [s.name for s in chosen] == ["cu128-torch2.8"]
    assert len({s.name for s in choose(specs(), Selection(python="3.12"))}) == 4


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

    from imagegen.matrix import model as matrix_module
    from imagegen.matrix import plan
    from tests.helpers import MATRIX_PATH

    trainer = plan.Trainer("0.1.0", (Requirement("transformers>=4.57"), Requirement("click>=8.0"),
                                     Requirement("Pillow")), (Requirement("setuptools>=64"),))
    spec = next(s for s in plan.resolve(matrix_module.read(MATRIX_PATH), trainer) if s.name == "cpu")
    assert spec.trainer_requirements == ("Pillow", "click>=8.0", "setuptools>=64")


def test_only_images_with_cuda_get_the_trainers_cuda_extra():
    from packaging.requirements import Requirement

    from imagegen.matrix import model as matrix_module
    from imagegen.matrix import plan
    from tests.helpers import MATRIX_PATH

    trainer = plan.Trainer("0.1.0", (Requirement("click>=8.0"),), (), (Requirement("bitsandbytes>=0.45"),))
    requirements = {s.name: s.trainer_requirements for s in plan.resolve(matrix_module.read(MATRIX_PATH), trainer)}
    assert requirements["cpu"] == ("click>=8.0",)
    assert requirements["cu124-torch2.6"] == ("bitsandbytes>=0.45", "click>=8.0")
    assert all("bitsandbytes>=0.45" in wanted for name, wanted in requirements.items() if name != "cpu")


def test_the_trainers_qlora_extra_is_what_cuda_images_add(tmp_path):
    from imagegen.matrix import plan
    from imagegen.workspace import read_trainer
    from tests.helpers import REPO

    trainer = read_trainer(REPO / "trainer")
    assert [r.name for r in trainer.cuda_requirements] == ["bitsandbytes"]
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "1.0"\ndependencies = ["click"]\n')
    assert read_trainer(tmp_path).cuda_requirements == ()


def test_an_image_of_two_platforms_is_one_spec_per_platform_under_one_version_tag():
    amd64, arm64 = choose(specs(), Selection(images=("cu130-torch2.11",)))
    assert (amd64.platform, arm64.platform) == ("linux/amd64", "linux/arm64")
    assert (amd64.key, arm64.key) == ("cu130-torch2.11", "cu130-torch2.11-arm64")
    assert amd64.version_tag == arm64.version_tag and amd64.labels == arm64.labels
    assert arm64.ref() == amd64.ref() + "-arm64" and arm64.ref("cpu") == f"{arm64.repository}:cpu-arm64"
    assert arm64.python_platform == "aarch64-manylinux_2_39"
    assert arm64.cuda_arch_list == "9.0;10.0;12.1+PTX"  # GH200, GB200, DGX Spark
    assert arm64.lock.platform == "linux/arm64" and arm64.lock.inputs["platform"] == "aarch64-manylinux_2_39"


def test_the_inputs_digest_covers_every_platform():
    from imagegen.render import tags

    amd64, arm64 = choose(specs(), Selection(images=("cpu",)))
    other = replace(arm64.lock, packages=arm64.lock.packages[1:])
    assert plan.with_lock(arm64, other).lock is other
    from imagegen.render import contexts as render
    layers = render.render_specs(REPO / "templates", REPO / "trainer", [amd64, arm64])
    changed = render.render_specs(REPO / "templates", REPO / "trainer", [amd64, plan.with_lock(arm64, other)])
    assert render.inputs_digest(layers["cpu"] + layers["cpu-arm64"]) == amd64.inputs_digest
    assert render.inputs_digest(changed["cpu"] + changed["cpu-arm64"]) != amd64.inputs_digest
    assert tags.version_tag(amd64, amd64.inputs_digest) == amd64.version_tag


def test_platform_selection_narrows_the_others():
    (spec,) = choose(specs(), Selection(images=("cpu",), platform="linux/arm64"))
    assert spec.key == "cpu-arm64"
    with pytest.raises(UserError, match="no image matches --image cu124-torch2.6 --platform linux/arm64"):
        choose(specs(), Selection(images=("cu124-torch2.6",), platform="linux/arm64"))
