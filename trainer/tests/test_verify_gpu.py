"""trainer/scripts/verify_gpu.py on this CPU machine: its arguments, its answer without a GPU, and --cpu-smoke, which
takes the GPU run's code paths (Conv3d timing with cuDNN on and off, GRPO steps through vlmgrpo's trainer) at tiny
sizes. What it measures on a GPU is recorded in bench/RESULTS.md by hand; no test depends on those figures."""

import importlib.util
import json
import sys

import pytest

from conftest import REPO

SCRIPTS = REPO / "trainer" / "scripts"
PART_FIELDS = {
    "conv3d": {"module", "patches", "embed_dim", "dtype", "cudnn_on_forward_ms", "cudnn_off_forward_ms",
               "cudnn_on_forward_backward_ms", "cudnn_off_forward_backward_ms", "max_abs_difference"},
    "grpo": {"steps", "step_seconds_mean", "step_seconds_median", "rollout_tokens", "rollout_tokens_per_second",
             "peak_memory_allocated_gib", "device_memory_used_gib"},
}


@pytest.fixture(scope="module")
def verify_gpu():
    spec = importlib.util.spec_from_file_location("verify_gpu", SCRIPTS / "verify_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(verify_gpu, argv, capsys) -> tuple[int, dict, str]:
    code = verify_gpu.main(argv)
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def test_arguments(verify_gpu, tmp_path, capsys):
    args = verify_gpu.parse_args([])
    assert (args.steps, args.conv_embed_dim, args.conv_patches) == (10, 1280, 8 * 2304) and not args.cpu_smoke
    assert verify_gpu.parse_args(["--hd128-shape", "3b"]).hd128_shape == "3b" and args.hd128_shape == "tiny"
    args = verify_gpu.parse_args(["--cpu-smoke", "--steps", "3"])
    assert (args.steps, args.conv_embed_dim, args.batch_size) == (3, 32, 2)
    for argv, message in ((["--steps", "0"], "--steps 0: at least 1"),
                          (["--batch-size", "6", "--num-generations", "4"], "a multiple of --num-generations 4"),
                          (["--out", str(tmp_path / "no" / "r.json")], "does not exist"),
                          (["--model", str(tmp_path)], "no config.json there"),
                          (["--parts", "grpo,fa5"], "--parts fa5: choose from conv3d,attention,")):
        assert verify_gpu.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_without_a_gpu_nothing_is_measured_and_it_says_why(verify_gpu, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here")
    code, result, err = run(verify_gpu, ["--out", str(tmp_path / "r.json")], capsys)
    assert code == 0 and result["status"] == "nothing measured" and result["parts"] == {}
    assert "sees no CUDA device" in result["reason"] or "without CUDA" in result["reason"]
    assert err.startswith("no CUDA GPU: nothing measured (")
    assert json.loads((tmp_path / "r.json").read_text()) == result


def test_parts_picks_what_runs(verify_gpu, tmp_path, capsys):
    """A lent GPU machine's minutes are few: --parts runs only the parts named (here those that need no model)."""
    code, result, err = run(verify_gpu, ["--cpu-smoke", "--parts", "attention,gpu_checks"], capsys)
    assert code == 0 and list(result["parts"]) == ["attention", "gpu_checks"], err[-2000:]
    assert "attention        measured  auto picks sdpa on no GPU" in err


@pytest.mark.slow
def test_cpu_smoke_takes_the_gpu_runs_code_paths(verify_gpu, tmp_path, capsys):
    code, result, err = run(verify_gpu, ["--cpu-smoke", "--out", str(tmp_path / "r.json")], capsys)
    assert code == 0, err[-3000:]
    assert result["mode"] == "cpu-smoke" and result["status"] == "measured"
    assert {"torch", "cuda", "cudnn", "transformers", "trl", "vllm", "gpu"} <= set(result["machine"])
    parts = result["parts"]
    assert list(parts) == list(verify_gpu.PARTS)
    for name, fields in PART_FIELDS.items():
        assert parts[name]["status"] == "measured" and fields <= set(parts[name]), parts[name]
    assert parts["grpo_sdpa_hd128"]["status"] == "measured" and parts["grpo_sdpa_hd128"]["attention"] == "sdpa"
    assert parts["grpo"]["attention"] == parts["attention"]["auto"] == "sdpa"  # no GPU: SDPA, and why
    assert parts["attention"]["flash_attn_4"] and parts["attention"]["gpus"] == []
    assert parts["gpu_checks"] == {"status": "skipped", "reason": "the GPU checks need a CUDA GPU"}
    assert parts["grpo_fa4_hd128"] == {"status": "skipped", "reason": "flash-attention 4 needs a CUDA GPU"}
    assert "Qwen2_5_VisionPatchEmbed (Conv3d)" in parts["conv3d"]["module"]
    assert parts["conv3d"]["max_abs_difference"] < 1e-4  # the same convolution with and without cuDNN
    assert parts["grpo"]["steps"] == 2 and parts["grpo"]["rollout_tokens"] > 0
    assert parts["grpo"]["peak_memory_allocated_gib"] is None  # no GPU: no figure rather than a made-up one
    assert parts["grpo_vllm"] == {"status": "skipped", "reason": "colocated vLLM needs a CUDA GPU"}
    assert "grpo_vllm        skipped   skipped: colocated vLLM needs a CUDA GPU" in err
    assert json.loads((tmp_path / "r.json").read_text()) == result


def test_a_failed_part_is_reported_and_the_others_still_run(verify_gpu):
    measures = sys.modules["gpu_measures"]
    failed = measures.measure_part(lambda: 1 / 0)
    assert failed == {"status": "failed", "error": "ZeroDivisionError: division by zero"}
    table = verify_gpu.table({"parts": {"grpo": failed, "grpo_vllm": measures.skipped("vLLM not installed")}})
    assert "grpo             failed    ZeroDivisionError" in table and "skipped: vLLM not installed" in table


def test_figures_leave_out_the_first_step_and_rollout(verify_gpu):
    measures = sys.modules["gpu_measures"]
    assert measures.step_figures([9.0, 1.0, 3.0]) == {"step_seconds_mean": 2.0, "step_seconds_median": 2.0}
    assert measures.step_figures([]) == {"step_seconds_mean": None, "step_seconds_median": None}
    figures = measures.rollout_figures([(5.0, 10), (1.0, 100), (1.0, 300)])
    assert figures == {"rollouts": 3, "rollout_tokens": 400, "rollout_seconds": 2.0, "rollout_tokens_per_second": 200.0}


def test_vllm_is_measured_only_where_it_imports(verify_gpu, monkeypatch):
    measures = sys.modules["gpu_measures"]
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ModuleNotFoundError
    assert measures.vllm_status() == (False, "vLLM not installed")
    settings = measures.RunSettings(device="cuda", steps=1, num_generations=2, batch_size=2, completion_length=4)
    assert measures.vllm_part({}, settings, None) == {"status": "skipped", "reason": "vLLM not installed"}


@pytest.mark.skipif("not __import__('torch').cuda.is_available()",
                    reason="needs a CUDA GPU: on a lent one run `python trainer/scripts/verify_gpu.py --out "
                           "result.json` (docs/gpu-verification.md)")
def test_on_a_gpu_every_part_is_measured_or_skipped_with_a_reason(verify_gpu, tmp_path, capsys):
    code, result, err = run(verify_gpu, ["--steps", "2", "--conv-repeats", "2", "--work-dir", str(tmp_path)], capsys)
    assert code == 0, err[-3000:]
    assert result["parts"]["grpo"]["peak_memory_allocated_gib"] > 0
    assert result["parts"]["grpo_vllm"]["status"] in ("measured", "skipped")


def test_the_3b_shape_has_qwen2_5_vl_3b_layer_sizes(verify_gpu, tmp_path, monkeypatch):
    """--hd128-shape 3b: Qwen2.5-VL-3B's sizes over the tiny model's tokenizer and processor (here with 2 layers a
    part, so that it is made on the CPU in seconds): per-layer lists follow the layer count, heads of 128 and 80."""
    from transformers import AutoConfig

    sizes = {"text": {**verify_gpu.QWEN2_5_VL_3B["text"], "num_hidden_layers": 3, "intermediate_size": 64},
             "vision": {**verify_gpu.QWEN2_5_VL_3B["vision"], "depth": 3, "intermediate_size": 64,
                        "fullatt_block_indexes": [2]}}
    monkeypatch.setattr(verify_gpu, "QWEN2_5_VL_3B", sizes)
    config = AutoConfig.from_pretrained(verify_gpu.make_model(tmp_path / "m", 128, "qwen2_5_vl", shape="3b"))
    text, vision = config.text_config, config.vision_config
    assert (text.hidden_size, text.num_hidden_layers, len(text.layer_types)) == (2048, 3, 3)
    assert text.hidden_size // text.num_attention_heads == 128 and vision.hidden_size // vision.num_heads == 80
    assert vision.out_hidden_size == text.hidden_size and (tmp_path / "m" / "tokenizer.json").is_file()
