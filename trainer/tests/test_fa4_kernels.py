"""FlashAttention 4's kernels built into the images (vlmgrpo/fa4kernels): what is compiled (targets.json read into
attention cases and GPUs) and where a run finds them (runtime.plan, seed). Compiling and loading with FA4 itself runs
in the image (tests/test_image_cuda_wheels.py): flash-attn-4 is not installed here."""

from __future__ import annotations

import json

import pytest

from vlmgrpo.fa4kernels import build, runtime

TARGETS = json.loads(build.TARGETS.read_text())


def test_the_families_configs_give_each_distinct_attention_call_once():
    cases = build.cases(TARGETS["families"], TARGETS["shapes"])
    text = {(c["head_dim"], c["ratio"], c["path"]) for c in cases if c["causal"]}
    # Qwen2.5-VL 3B 16/2 heads, 7B 28/4, 32B 40/8, 72B 64/8; Qwen2-VL 2B 12/2: ratios 8, 7, 5, 8, 6; head_dim 128
    assert text == {(128, ratio, path) for ratio in (5, 6, 7, 8) for path in ("dense", "varlen-int", "varlen-tensor")}
    (vision,) = [c for c in cases if not c["causal"]]
    assert (vision["head_dim"], vision["ratio"], vision["path"]) == (80, 1, "varlen-int")  # 1280 / 16 heads
    assert [1, 64, 64] in vision["shapes"] and [257, 257 * 64, 64] in vision["shapes"]  # Qwen2.5-VL's windows
    seven = next(c for c in cases if c["ratio"] == 7 and c["path"] == "dense")
    assert seven["families"] == ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"]
    assert len(seven["shapes"]) == len(TARGETS["shapes"]["batches"]) * len(TARGETS["shapes"]["sequences"])


def test_a_new_family_is_one_entry_of_data():
    families = {"org/Tiny-VL": {"text": {"hidden_size": 384, "num_attention_heads": 6, "num_key_value_heads": 2},
                                "vision": {"hidden_size": 192, "num_heads": 3}}}
    cases = build.cases(families, TARGETS["shapes"])
    assert {(c["head_dim"], c["ratio"], c["causal"]) for c in cases} == {(64, 3, True), (64, 1, False)}


@pytest.mark.parametrize("archs, low, wanted", [
    (["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], 9,
     {"H100 SXM, H200", "H100 PCIe", "B200", "RTX PRO 6000 Blackwell Server"}),
    (["sm_80", "sm_90"], 9, {"H100 SXM, H200", "H100 PCIe"}),  # a torch not built for Blackwell
    (["sm_90", "sm_100", "sm_120"], 10, {"B200", "RTX PRO 6000 Blackwell Server"}),  # transformers from sm100 only
    (["sm_70", "sm_75"], 9, set()),
])
def test_gpus_are_those_torch_is_built_for_and_fa4_runs_on(archs, low, wanted):
    assert set(build.gpus_for(TARGETS["gpus"], archs, low)) == wanted


def test_each_gpu_kind_has_a_directory_of_its_own():
    directories = [build.gpu_directory(gpu) for name, gpu in TARGETS["gpus"].items() if name != "about"]
    assert len(set(directories)) == len(directories) and "sm90-132sms" in directories


def _image_cache(tmp_path):
    """An image's cache as build.py leaves it: a directory per GPU kind, its files under FA4's fingerprint."""
    root = tmp_path / "image"
    for directory in ("sm90-132sms", "sm100-148sms"):
        (root / directory / "f1ng3r" / "fwd").mkdir(parents=True)
        (root / directory / "f1ng3r" / "fwd" / "k.o").write_bytes(directory.encode())
        (root / directory / "f1ng3r" / "fwd" / "k.lock").write_bytes(b"")
    shipped = {"gpus": {"H100 SXM, H200": {"sm": 90, "sms": 132, "directory": "sm90-132sms", "keys": 1},
                        "B200": {"sm": 100, "sms": 148, "directory": "sm100-148sms", "keys": 1}}}
    return root, shipped


def test_a_run_on_a_gpu_the_image_has_starts_from_its_kernels(tmp_path):
    root, shipped = _image_cache(tmp_path)
    env = {runtime.KERNELS_VARIABLE: str(root)}
    cache, source, line = runtime.plan(str(tmp_path / "out"), 90, 132, shipped, [], env)
    assert cache == tmp_path / "out" / ".fa4-kernels" / "sm90-132sms" and source == root / "sm90-132sms"
    assert line.startswith("flash-attention 4 kernels: from the image for this GPU (sm90 with 132 SMs: H100 SXM, "
                           "H200, 1 kernels)") and str(cache) in line
    assert runtime.seed(source, cache) == 2 and (cache / "f1ng3r" / "fwd" / "k.o").read_bytes() == b"sm90-132sms"
    assert runtime.seed(source, cache) == 0  # a second rank, or a restart: nothing copied again


def test_a_gpu_the_image_lacks_or_changed_sources_compile_into_the_run_s_cache(tmp_path):
    root, shipped = _image_cache(tmp_path)
    env = {runtime.KERNELS_VARIABLE: str(root)}
    cache, source, line = runtime.plan(str(tmp_path / "out"), 100, 132, shipped, [], env)  # a B200 has 148
    assert source is None and cache.name == "sm100-132sms"
    assert "the image has none for this GPU (sm100 with 132 SMs; it has B200 (sm100, 148 SMs), H100 SXM, H200 " \
           "(sm90, 132 SMs)): compiled at the first step" in line
    _, source, line = runtime.plan(str(tmp_path / "out"), 90, 132, shipped, ["flash_attn/cute/interface.py"], env)
    assert source is None and "compiled from other FA4 sources (flash_attn/cute/interface.py differs)" in line
    _, source, line = runtime.plan(str(tmp_path / "out"), 90, 132, None, [], {})
    assert source is None and "none in this image (VLMGRPO_FA4_KERNELS names no cache)" in line


def test_a_cache_the_user_names_is_the_one_used_and_seeded(tmp_path):
    root, shipped = _image_cache(tmp_path)
    env = {runtime.KERNELS_VARIABLE: str(root), runtime.CACHE_DIR: str(tmp_path / "shared")}
    cache, source, _ = runtime.plan(str(tmp_path / "out"), 90, 132, shipped, [], env)
    assert cache == tmp_path / "shared" and source == root / "sm90-132sms"


def test_a_model_s_config_is_read_as_a_family_and_what_the_image_lacks_is_compiled_once(tiny):
    """The tiny Qwen2.5-VL (4 text heads of 16 over 2 key-value heads; a vision tower of 2 heads): none of its
    attention calls is in the image's cases, which are the real families'; the real 3B's calls all are."""
    from vlmgrpo.models.loading import load_model_config

    family = runtime.model_family(load_model_config(tiny["model"]))
    config = load_model_config(tiny["model"])
    assert family["text"]["num_key_value_heads"] == config.text_config.num_key_value_heads
    assert family["vision"]["num_heads"] == config.vision_config.num_heads
    shipped = {"cases": build.cases(TARGETS["families"], TARGETS["shapes"])}
    assert len(runtime.missing_cases(family, shipped, seeded=True)) == 4  # three text paths and the vision tower
    three_b = TARGETS["families"]["Qwen/Qwen2.5-VL-3B-Instruct"]
    assert runtime.missing_cases(three_b, shipped, seeded=True) == []
    assert len(runtime.missing_cases(three_b, shipped, seeded=False)) == 4  # the image has none for this GPU


def test_the_rank_that_finds_the_mark_compiles_nothing(tmp_path):
    family = TARGETS["families"]["Qwen/Qwen2.5-VL-3B-Instruct"]
    runtime.compiled_mark(tmp_path, runtime.run_targets(90, 132, family)).touch()  # another rank compiled them
    assert runtime.compile_once(tmp_path, 90, 132, family) is None
    assert runtime.compiled_mark(tmp_path, runtime.run_targets(90, 114, family)) != \
        runtime.compiled_mark(tmp_path, runtime.run_targets(90, 132, family))  # another GPU kind: its own
