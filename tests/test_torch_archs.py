"""What a torch build was compiled for, and the archs an image claims from it (imagegen/matrix/torch_archs.py)."""

import pytest

from imagegen.matrix import torch_archs

from tests.helpers import edited, planned_from, problems_of, warnings_of


def test_torch_s_flags_in_the_matrix_s_spelling():
    assert torch_archs.from_flags("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120".split()) == (
        "7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert torch_archs.from_flags("sm_90 sm_90a sm_120 compute_120".split()) == ("9.0", "9.0a", "12.0+PTX")
    assert torch_archs.from_flags([]) == ()


@pytest.mark.parametrize("built, arch, runs", [
    (("7.5", "8.0", "8.6", "9.0"), "8.9", True),  # sm_86's binary runs on 8.9: the same major
    (("7.5", "8.0", "8.6", "9.0"), "7.0", False),  # nothing for Volta
    (("8.0", "9.0", "10.0", "12.0"), "12.1", True),  # DGX Spark (GB10) runs sm_120's binary
    (("8.0", "9.0"), "10.0", False),  # no binary for 10.x, and no PTX
    (("8.0", "9.0+PTX"), "12.0", True),  # PTX is compiled on the fly for every later GPU
    (("9.0a",), "9.0", True),
    (("9.0a",), "9.1", False),  # arch-specific code runs on that GPU alone
])
def test_covers(built, arch, runs):
    assert torch_archs.covers(built, arch) is runs


def test_a_build_not_compiled_for_a_listed_gpu_is_a_warning_and_the_image_does_not_claim_it():
    """torch 2.7.1's CUDA 12.8 build starts at sm_75 while CUDA 12.8's line lists Volta (7.0): its in-image
    cuda.archs check would fail the first time the image was built."""
    cu128 = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"]
    data = edited(lambda d: d["torch"]["2.7.1"]["builds"]["12.8"].update(archs={"linux/amd64": cu128}))
    assert problems_of(data) == []
    (warning,) = [w for w in warnings_of(data) if w.rule == "torch-archs"]
    assert warning.key.endswith(".torch") and "torch 2.7.1's CUDA 12.8 build does not run on 7.0 on linux/amd64" \
        in warning.message
    (plan,) = [p for p in planned_from(data) if p.name == "cu128-torch2.7"]
    assert plan.gpu.archs == ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")
    assert plan.kernels.arch_list.startswith("7.5;")
    (other,) = [p for p in planned_from(data) if p.name == "cu128-torch2.8"]  # torch 2.8.0's build: not said
    assert other.gpu.archs[0] == "7.0"


def test_archs_must_be_compute_capabilities_per_platform():
    data = edited(lambda d: d["torch"]["2.7.1"]["builds"]["12.8"].update(archs={"linux/amd64": ["sm_75"]}))
    (problem,) = problems_of(data)
    assert problem.key == "torch.2.7.1.builds.12.8.archs.linux/amd64[0]"
    assert problem.message == "'sm_75' is not a compute capability such as 8.6 or 12.0+PTX"
    listed = edited(lambda d: d["torch"]["2.7.1"]["builds"]["12.8"].update(archs=["7.5"]))
    assert [p.rule for p in problems_of(listed)] == ["type"]
