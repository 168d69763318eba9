"""trainer/scripts/verify_gpu.py on this CPU machine: its arguments, its refusal without a GPU, its measurements
from a real (short) bf16 run's metrics, and the report it writes. The GPU run itself needs a GPU machine."""

import importlib.util
import json
import sys

import pytest

from conftest import REPO

SCRIPT = REPO / "trainer" / "scripts" / "verify_gpu.py"


@pytest.fixture(scope="module")
def verify_gpu():
    spec = importlib.util.spec_from_file_location("verify_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def results(verify_gpu, checks):
    return {
        "date": "2026-01-02 03:04 UTC", "host": "gpu-1, 64 CPUs",
        "machine": {"torch": "2.8.0+cu128", "cuda": "12.8", "bf16": True,
                    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.1, "capability": "9.0"}] * 2},
        "versions": {"torch": "2.8.0+cu128", "transformers": "5.24.0", "flash_attn": None},
        "measured": {"steps": 20, "steps_expected": 20, "steps_per_second": 1.25, "seconds_per_step": 0.8,
                     "peak_memory_gib": 3.5, "wall_seconds": 61.2, "final_loss": 0.01},
        "checks": checks,
    }


def test_arguments(verify_gpu, tmp_path):
    args = verify_gpu.parse_args([])
    assert args.steps == 20 and args.out == REPO / "docs" / "gpu-verification.md" and args.python == sys.executable
    args = verify_gpu.parse_args(["--wheelhouse", str(tmp_path), "--steps", "5", "--out", str(tmp_path / "r.md")])
    assert args.wheelhouse == [str(tmp_path)] and args.steps == 5
    for argv, message in ((["--steps", "1"], "--steps 1: at least 2"),
                          (["--wheelhouse", str(tmp_path / "nope")], "no such directory"),
                          (["--out", str(tmp_path / "no" / "r.md")], "does not exist")):
        with pytest.raises(verify_gpu.CannotRun, match=message):
            verify_gpu.parse_args(argv)


def test_install_takes_missing_wheels_from_the_wheelhouses_only(verify_gpu):
    command = verify_gpu.install_command("/usr/bin/python3", ["/w1", "/w2"])
    assert command[:4] == ["/usr/bin/python3", "-m", "pip", "install"]
    assert "--no-index" in command and "--find-links=/w1" in command and "--find-links=/w2" in command
    assert command[-1] == str(REPO / "trainer") and "torch" not in " ".join(command)
    assert "--no-index" not in verify_gpu.install_command("python", [])


def test_without_a_gpu_it_refuses_and_writes_nothing(verify_gpu, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    out = tmp_path / "report.md"
    assert verify_gpu.main(["--out", str(out), "--no-install"]) == 2
    assert "no GPU visible to torch" in capsys.readouterr().err and not out.exists()


def test_report_lists_date_hardware_measures_and_every_check(verify_gpu, tmp_path):
    checks = [{"name": "gpu.bf16_matmul", "status": "pass", "detail": "max abs diff 0.1 | scale 30"},
              {"name": "gpu.flash_attn", "status": "fail", "detail": "not importable"},
              {"name": "version.torch", "status": "skip", "detail": "no expected-versions file"}]
    text = verify_gpu.render_report(results(verify_gpu, checks))
    assert "- Date: 2026-01-02 03:04 UTC" in text
    assert "2 x NVIDIA H100 80GB HBM3 (79.1 GiB, sm 9.0), NVIDIA H100 80GB HBM3" in text
    assert "| steps/s (steps 2 onward) | 1.25 |" in text and "| 3.5 GiB |" in text
    assert "1 check(s) failed (1 passed, 1 failed, 1 skipped)" in text
    assert "| gpu.bf16_matmul | pass | max abs diff 0.1 \\| scale 30 |" in text
    assert "flash_attn" not in text.split("## 20-step")[0].split("Versions:")[1].split("\n")[0]  # absent: not listed
    out = tmp_path / "report.md"
    verify_gpu.write_report(out, text)
    assert out.read_text() == text and [p.name for p in tmp_path.iterdir()] == ["report.md"]


@pytest.mark.slow
def test_the_bf16_run_and_its_measures_on_the_cpu(verify_gpu, tmp_path):
    """The run the script makes on the GPU, here for 2 steps on the CPU: its command is accepted, and the
    measures and checks come from the run's own metrics.jsonl."""
    measured, checks = verify_gpu.tiny_grpo(sys.executable, tmp_path, 2, completion_length=8)
    assert {c["name"]: c["status"] for c in checks} == {
        "train.bf16_grpo.exit": "pass", "train.bf16_grpo.steps": "pass", "train.bf16_grpo.loss_finite": "pass",
        "train.bf16_grpo.model_saved": "pass"}, checks
    assert measured["steps"] == 2 and measured["steps_per_second"] > 0 and measured["peak_memory_gib"] is None
    config = (tmp_path / "run" / "vlmgrpo_config.yaml").read_text()
    assert "\nbf16: true\n" in config and "\ndtype: bfloat16\n" in config
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert measured["seconds_per_step"] == pytest.approx(rows[1]["step_time"], abs=1e-3)
