"""The flash-attention 4 checks: attached to images that have flash-attn-4 (skipped with the reason elsewhere), and
what each reports. The images with flash-attn-4 run them for real (tests/test_image_cuda_wheels.py)."""

import sys
import types

import pytest

from vlmgrpo.image import checks
from vlmgrpo.image.checks import FAIL, PASS, SKIP, Context, flash_attn_4, gpu_flash_attn_4, run_checks


def by_name(results):
    return {r["name"]: r for r in results}


def test_skipped_with_the_reason_in_an_image_without_flash_attn_4():
    expected = {"versions": {"flash_attn_4": None, "torch": "2.14.1"},
                "distributions": {"flash_attn_4": "flash-attn-4"}}
    found = by_name(run_checks(Context(expected=expected, skip_train=True)))
    for name in (*flash_attn_4.NAMES, *gpu_flash_attn_4.NAMES):
        assert found[name]["status"] == SKIP
    assert found["flash_attn_4.import"]["detail"] == "no flash_attn_4 in this image (expected.json: flash_attn_4 none)"


def test_attached_to_the_component_and_the_gpu():
    assert flash_attn_4.NEEDS == ("flash_attn_4",)
    assert gpu_flash_attn_4.NEEDS == ("flash_attn_4", "gpu", "fa4_arch")
    assert (flash_attn_4.PHASE, gpu_flash_attn_4.PHASE) == ("components", "gpu")  # the import before the GPU work


@pytest.mark.parametrize("flavor, torch_cuda, status", [("13", "13.0", PASS), ("12", "12.8", PASS),
                                                        ("12", "13.0", FAIL), ("13", None, PASS)])
def test_the_cutlass_dsl_libraries_match_the_torch_cuda_major(monkeypatch, flavor, torch_cuda, status):
    monkeypatch.setattr(flash_attn_4, "cutlass_flavor", lambda: flavor)
    got, detail = flash_attn_4.cutlass_check(torch_cuda)
    assert got == status
    assert f"its cu{flavor} libraries" in detail
    if status == FAIL:
        assert "the image needs its cu13 libraries" in detail


def test_flash_attn_cute_without_the_distribution_fails(monkeypatch):
    """flash-attn 2's own wheel may carry a flash_attn/cute folder: only flash-attn-4's metadata says it is 4."""
    cute = types.SimpleNamespace(__file__="/x/flash_attn/cute/__init__.py")
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(cute=cute))
    monkeypatch.setattr(flash_attn_4, "installed_version", lambda name: None)
    status, detail = flash_attn_4.import_check()
    assert status == FAIL and "no flash-attn-4 is installed" in detail


def test_the_gpu_check_skips_a_gpu_outside_flash_attention_4s_range(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 0))
    with_fa4 = {"versions": {"flash_attn_4": "4.0.0b4"}}
    visible = checks.unmet_need(gpu_flash_attn_4, Context(expected=with_fa4), gpu=lambda: (True, ""))
    assert visible[0] == SKIP and visible[1].startswith("GPU 0 is sm70; flash-attention 4 runs on sm")  # the runner's
    hidden = checks.unmet_need(gpu_flash_attn_4, Context(expected=with_fa4, require_gpu=True), gpu=lambda: (False, "x"))
    assert hidden == (FAIL, "x")  # asked only once a GPU is visible
