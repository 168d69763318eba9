"""Planned and locked images, tags and labels: derived from what is inside, deterministic, unique."""

import json
import re
from dataclasses import fields, replace

import pytest

from imagegen.core.errors import UserError
from imagegen.locking import inputs
from imagegen.matrix import plan as plan_module
from imagegen.matrix.select import Selection, choose, version_matches

from tests.helpers import (FIXTURE_MATRIX, edited, fixture_workspace, loaded, locked_named, parsed, planned, planned_from,
                           planned_named)

TABLE = loaded().matrix.components  # the fixture's component table, which --with names


def test_torch_comes_from_pypi_when_pypi_serves_that_very_build():
    plan = planned_named("cu124-torch2.6")
    assert plan.base.image == "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    assert plan.torch.index_url is None  # PyPI's torch 2.6.0 is the CUDA 12.4 build
    assert plan.base.python_source == "deadsnakes" and plan.base.python_platform == "x86_64-manylinux_2_35"
    assert plan.kernels.flash_attn_wheel_url.endswith(
        "v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")
    other = planned_named("cu128-torch2.7")
    assert other.torch.index_url == "https://download.pytorch.org/whl/cu128"
    assert "torch==2.7.1+cu128" in inputs.resolution_requirements(other)


def test_cpu_image_takes_torch_from_pypi_with_the_libraries_its_lock_pins():
    image = locked_named("cpu")
    assert image.plan.torch.index_url is None and image.plan.base.image == "debian:bookworm-slim"
    versions = image.versions
    assert (versions["torch_cuda"], versions["cudnn"], versions["nccl"]) == (
        "13.0", image.lock.package("nvidia-cudnn-cu13").version, image.lock.package("nvidia-nccl-cu13").version)
    assert versions["flash_attn"] is None and versions["deepspeed"] is None


def test_the_version_tag_spells_what_is_inside_and_ends_in_the_inputs_digest():
    image = locked_named("cpu")
    digest = image.inputs_digest.removeprefix("sha256:")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert image.version_tag == f"0.1.0-torch2.14.1-cu130-cudnn9-py3.11-debian12-{digest[:12]}"
    assert locked_named("cu124-torch2.6").version_tag.startswith("0.1.0-torch2.6.0-cu124-cudnn9-py3.11-")


def test_an_image_without_a_lock_is_planned_only_and_says_how_to_lock_it():
    plan = loaded()
    unlocked = [p for p in plan.images if p.key not in plan.locked]
    assert unlocked and not hasattr(unlocked[0], "version_tag") and not hasattr(unlocked[0], "ref")
    why = plan.lock_warnings[unlocked[0].key]
    assert f"imagegen lock --matrix {FIXTURE_MATRIX} --image {unlocked[0].name}" in why
    assert ".github/workflows/locks.yml" in why


def test_cudnn_and_nccl_come_from_the_lock_not_the_typed_facts():
    image = locked_named("cu126-torch2.7")
    assert image.versions["cudnn"] == image.lock.family_version("nvidia-cudnn-cu")
    fake = replace(image.lock, packages=tuple(replace(p, version="9.99.0.1") if p.name == "nvidia-cudnn-cu12" else p
                                              for p in image.lock.packages))
    assert inputs.locked_versions(image.plan, fake)["cudnn"] == "9.99.0.1"


def test_aliases_move_to_the_newest_torch_per_cuda_and_latest():
    by_name = {image.name: image for image in loaded().locked.values()}
    assert "cu12.8" in by_name["cu128-torch2.8"].alias_tags
    assert "latest" in by_name["cu128-torch2.8"].alias_tags
    assert by_name["cpu"].alias_tags == ("cpu",)
    from imagegen.render import tags
    assert "cu12.8" not in tags.aliases(planned(), "cu128-torch2.8")["cu128-torch2.7"]


def test_labels_carry_oci_keys_one_label_per_component_and_the_inputs():
    image = locked_named("cu124-torch2.6")
    labels = image.labels
    assert labels["org.opencontainers.image.version"] == image.version_tag
    assert labels["io.imagegen.torch"] == "2.6.0" and labels["io.imagegen.torch.cuda"] == "12.4"
    assert labels["io.imagegen.flash-attn"] == "2.7.4.post1" and labels["io.imagegen.base.cudnn"] == "9"
    assert labels["io.imagegen.inputs"] == image.inputs_digest
    assert {f"io.imagegen.{c.label}" for c in image.plan.components} <= set(labels)
    assert labels["org.opencontainers.image.description"] == (
        "GRPO trainer for vision-language models: torch 2.6.0 (CUDA 12.4), Python 3.11, flash-attn 2.7.4.post1, "
        "deepspeed 0.18.9, transformers 5.24.0, trl 1.16.0")
    assert labels["io.imagegen.cuda"] == labels["io.imagegen.cuda.toolkit"] == "12.4.1"
    # nvidia/cuda's 12.4 base: a driver of CUDA 12.4 on any GPU, or on a datacenter GPU the branches its cuda-compat
    # serves (tests/test_drivers.py)
    assert labels["io.imagegen.min-driver"] == "550"
    assert labels["io.imagegen.driver.datacenter-branches"] == "470 525 535"


def test_the_cpu_image_says_the_cuda_its_torch_wheels_carry_and_the_driver_they_need():
    """PyPI's torch is its CUDA 13.0 build, whose libraries are wheels: the cpu image carries CUDA 13.0 without a
    toolkit, and on a GPU host needs CUDA 13.0's minimum driver, from the matrix's facts for CUDA 13.0."""
    for image in (locked_named("cpu"), locked_named("cpu", "linux/arm64")):
        labels = image.labels
        assert labels["io.imagegen.cuda"] == labels["io.imagegen.torch.cuda"] == "13.0"
        assert labels["io.imagegen.cuda.toolkit"] == "none" and labels["io.imagegen.min-driver"] == "580"
        assert labels["io.imagegen.driver.datacenter-branches"] == "none"  # no cuda-compat in torch's wheels
        assert image.expected().driver.min_driver == "580"
        assert labels["org.opencontainers.image.description"].startswith(
            "GRPO trainer for vision-language models: torch 2.14.1 (CUDA 13.0 libraries from torch's wheels, no CUDA "
            "toolkit; a GPU needs NVIDIA driver 580 or newer), Python 3.11, ")


def test_a_planned_image_carries_only_the_components_it_names():
    """Its rows of the table, in the table's order: one it never names is not among them (the table is the
    matrix's)."""
    from tests.test_components import add_liger

    data = edited(add_liger)  # a component the cpu image alone names
    table = parsed(data).components
    for plan in planned_from(data):
        assert plan.components.keys == tuple(key for key in table.keys if key in plan.versions)
        assert ("liger_kernel" in plan.components) == (plan.name == "cpu"), plan.key


def test_source_builds_compile_for_ampere_and_newer_only():
    assert planned_named("cu118-torch2.6").kernels.arch_list == "8.0;8.6;8.9;9.0+PTX"


def test_expected_versions_match_the_labels_and_name_each_distribution():
    image = locked_named("cu128-torch2.8")
    expected = image.expected().model_dump()
    for component in image.plan.components:
        assert (expected["versions"][component.key] or "none") == image.labels[f"io.imagegen.{component.label}"]
    assert expected["distributions"]["flash_attn"] == "flash-attn"
    assert expected["families"] == {"cudnn": "nvidia-cudnn-cu", "nccl": "nvidia-nccl-cu"}
    json.dumps(expected)


def test_the_lock_resolves_the_pins_the_trainers_needs_flash_attns_needs_and_build_tools():
    plan = planned_named("cu130-torch2.11")
    wanted = inputs.resolution_requirements(plan)
    assert {"torch==2.11.0", "torchvision==0.26.0", f"transformers=={plan.version('transformers')}", "einops",
            "deepspeed==0.19.8", "ninja", "setuptools"} <= set(wanted)
    assert not any(line.startswith("flash-attn") for line in wanted)  # locked as an artifact
    assert inputs.lock_inputs(plan)["flash_attn"]["requirement"] == "flash-attn==2.8.3"


@pytest.mark.parametrize("wanted, actual, matches", [
    ("12.4", "12.4.1", True), ("12", "12.4.1", True), ("12.4.1", "12.4.1", True),
    ("12.4", "12.40.1", False), ("12.4.0", "12.4.1", False), ("12.4", None, False),
])
def test_version_prefix_matching(wanted, actual, matches):
    assert version_matches(wanted, actual) is matches


def test_selection_combines_with_and():
    chosen = choose(planned(), Selection(cuda="12.8", torch="2.8"), TABLE)
    assert [p.name for p in chosen] == ["cu128-torch2.8"]
    assert len({p.name for p in choose(planned(), Selection(python="3.12"), TABLE)}) == 4


def test_with_a_component_picks_the_images_that_have_it():
    """`imagegen matrix --with vllm` lists the images with vLLM: a component's version is set, not none."""
    names = {p.name for p in planned()}
    with_deepspeed = {p.name for p in choose(planned(), Selection(components=("deepspeed",)), TABLE)}
    assert with_deepspeed == {p.name for p in planned() if p.version("deepspeed")} and "cpu" in names - with_deepspeed
    with pytest.raises(UserError) as caught:
        choose(planned(), Selection(components=("vlm",)), TABLE)
    assert str(caught.value).startswith("--with vlm: not a component; components: python, torch, ")


def test_no_match_lists_what_exists():
    with pytest.raises(UserError) as caught:
        choose(planned(), Selection(cuda="9.9"), TABLE)
    assert str(caught.value) == ("no image matches --cuda 9.9; CUDA versions: "
                                 "11.8, 12.1, 12.4, 12.6, 12.8, 13.0")


def test_unknown_image_name_lists_each_name_once():
    with pytest.raises(UserError) as caught:
        choose(planned(), Selection(images=("nope",)), TABLE)
    assert str(caught.value) == ("no image named nope; images: cu118-torch2.6, cu121-torch2.5, cu124-torch2.6, "
                                 "cu126-torch2.7, cu128-torch2.7, cu128-torch2.8, cu130-torch2.11, cpu")


def test_the_framework_layer_gets_the_trainers_dependencies_but_not_the_pinned_ones():
    from packaging.requirements import Requirement

    from imagegen.matrix import model as matrix_module

    trainer = plan_module.Trainer("0.1.0", (Requirement("transformers>=4.57"), Requirement("click>=8.0"),
                                            Requirement("Pillow")), (Requirement("setuptools>=64"),))
    cpu = next(p for p in plan_module.resolve(matrix_module.read(FIXTURE_MATRIX), trainer) if p.name == "cpu")
    assert cpu.trainer.requirements == ("Pillow", "click>=8.0", "setuptools>=64")


def test_only_images_with_cuda_get_the_trainers_cuda_extra():
    from packaging.requirements import Requirement

    from imagegen.matrix import model as matrix_module

    trainer = plan_module.Trainer("0.1.0", (Requirement("click>=8.0"),),
                                  extras={plan_module.CUDA_EXTRA: (Requirement("bitsandbytes>=0.45"),)})
    requirements = {p.name: p.trainer.requirements
                    for p in plan_module.resolve(matrix_module.read(FIXTURE_MATRIX), trainer)}
    assert requirements["cpu"] == ("click>=8.0",)
    assert requirements["cu124-torch2.6"] == ("bitsandbytes>=0.45", "click>=8.0")
    assert all("bitsandbytes>=0.45" in wanted for name, wanted in requirements.items() if name != "cpu")


def test_the_trainers_qlora_extra_is_what_cuda_images_add(tmp_path):
    from imagegen.workspace import read_trainer
    from tests.helpers import REPO

    trainer = read_trainer(REPO / "trainer")
    assert [r.name for r in trainer.cuda_requirements] == ["bitsandbytes"]
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "1.0"\ndependencies = ["click"]\n')
    assert read_trainer(tmp_path).cuda_requirements == ()


def test_an_image_of_two_platforms_is_one_locked_image_per_platform_under_one_version_tag():
    plan = loaded()
    amd64, arm64 = plan.require_locked(choose(plan.images, Selection(images=("cu130-torch2.11",)),
                                                              plan.matrix.components))
    assert (amd64.platform, arm64.platform) == ("linux/amd64", "linux/arm64")
    assert (amd64.key, arm64.key) == ("cu130-torch2.11", "cu130-torch2.11-arm64")
    assert amd64.version_tag == arm64.version_tag and amd64.labels == arm64.labels
    assert arm64.ref() == amd64.ref() + "-arm64" and arm64.ref("cpu") == f"{arm64.repository}:cpu-arm64"
    assert arm64.plan.base.python_platform == "aarch64-manylinux_2_39"
    assert arm64.plan.kernels.arch_list == "9.0;10.0;12.1+PTX"  # GH200, GB200, DGX Spark
    assert arm64.lock.platform == "linux/arm64" and arm64.lock.inputs["platform"] == "aarch64-manylinux_2_39"


def test_the_inputs_digest_covers_every_platform():
    from imagegen.render.contexts import Renderer
    from imagegen.render.locked import lock_images

    plan = loaded()
    cpu = [p for p in plan.images if p.name == "cpu"]
    locks = {p.key: plan.locked[p.key].lock for p in cpu}
    renderer = Renderer.of(FIXTURE_MATRIX.parent.parent.parent / "templates", FIXTURE_MATRIX.parent / "trainer",
                           FIXTURE_MATRIX.parent.parent.parent / "contract")
    again = lock_images(cpu, locks, renderer, None)
    assert again["cpu"].inputs_digest == plan.locked["cpu"].inputs_digest
    locks["cpu-arm64"] = replace(locks["cpu-arm64"], packages=locks["cpu-arm64"].packages[1:])
    changed = lock_images(cpu, locks, renderer, None)
    assert changed["cpu"].inputs_digest != plan.locked["cpu"].inputs_digest
    assert changed["cpu"].version_tag != plan.locked["cpu"].version_tag


def test_an_image_is_locked_only_when_every_platform_is(tmp_path):
    import shutil

    from tests.helpers import locked_matrix

    matrix = locked_matrix(tmp_path)
    lock = json.loads((tmp_path / "locks" / "cpu.json").read_text())
    del lock["platforms"]["linux/arm64"]
    (tmp_path / "locks" / "cpu.json").write_text(json.dumps(lock))
    shutil.copytree(FIXTURE_MATRIX.parent / "trainer", tmp_path / "trainer")
    plan = fixture_workspace().__class__(matrix, trainer=tmp_path / "trainer").load()
    assert "cpu" not in plan.locked and "cpu-arm64" not in plan.locked
    assert "another platform of cpu has no current lock" in plan.lock_problems["cpu"]
    assert "has no linux/arm64 lock" in plan.lock_problems["cpu-arm64"]


def test_platform_selection_narrows_the_others():
    (plan,) = choose(planned(), Selection(images=("cpu",), platform="linux/arm64"), TABLE)
    assert plan.key == "cpu-arm64"
    with pytest.raises(UserError, match="no image matches --image cu124-torch2.6 --platform linux/arm64"):
        choose(planned(), Selection(images=("cu124-torch2.6",), platform="linux/arm64"), TABLE)


def test_the_workspace_renders_each_image_once_with_the_runs_options(monkeypatch):
    from imagegen.render import contexts
    from imagegen.render.contexts import RenderOptions

    calls = []
    real = contexts.render_image
    monkeypatch.setattr(contexts, "render_image", lambda *a, **k: calls.append(a[0].key) or real(*a, **k))
    plan = fixture_workspace().load(RenderOptions((("", "local/debian:bookworm"),)))
    assert plan.locked["cpu"].contexts[0].dockerfile.count("FROM local/debian:bookworm") == 1
    # one render as built and one as the matrix's own base would name it, per platform image; no more
    assert sorted(calls) == sorted(2 * list(plan.locked))
    assert plan.locked["cpu"].version_tag == loaded().locked["cpu"].version_tag


def test_a_components_trainer_extra_is_installed_where_the_image_has_it_and_must_exist():
    from packaging.requirements import Requirement

    from tests.helpers import edited, image_named, parsed

    def with_lab(data):
        data["components"]["jupyterlab"] = {"title": "JupyterLab", "distribution": "jupyterlab", "trainer_extra": "lab"}
        image_named(data, "cpu")["jupyterlab"] = "4.6.6"
        data["packages"]["jupyterlab"] = {"4.6.6": {"python": ">=3.10"}}

    data = edited(with_lab)
    lab = {"lab": (Requirement("ipywidgets>=8"),)}
    trainer = plan_module.Trainer("0.1.0", (Requirement("click>=8.0"),), extras=lab)
    requirements = {p.name: p.trainer.requirements for p in plan_module.resolve(parsed(data), trainer)}
    assert requirements["cpu"] == ("click>=8.0", "ipywidgets>=8")
    assert all("ipywidgets>=8" not in wanted for name, wanted in requirements.items() if name != "cpu")
    with pytest.raises(UserError, match=r"components.jupyterlab.trainer_extra: the trainer has no extra 'lab'"):
        plan_module.resolve(parsed(data), plan_module.Trainer("0.1.0"))


def test_the_plain_data_publishes_every_field_of_every_part_once_under_its_flat_name():
    """`imagegen matrix --format json` and image.json print a plan flat, as it was before its fields were grouped:
    a field added to a part and left out of PUBLISHED would silently be missing there."""
    plan = planned_named("cu124-torch2.6")
    parts = [f.name for f in fields(plan) if type(getattr(plan, f.name)).__module__ == plan_module.__name__]
    every = [f.name for f in fields(plan) if f.name not in (*parts, "components")]
    every += [f"{part}.{f.name}" for part in parts for f in fields(getattr(plan, part))]
    assert sorted(plan_module.PUBLISHED.values()) == sorted(every)
    data = plan.as_dict()
    assert list(data) == list(plan_module.PUBLISHED)
    assert (data["cuda"], data["base_image"], data["cuda_arch_list"], data["lock_source"]) == (
        plan.gpu.cuda, plan.base.image, plan.kernels.arch_list, plan.torch.lock_source)
    assert json.loads(json.dumps(data))["driver"]["min_driver"] == plan.gpu.min_driver
