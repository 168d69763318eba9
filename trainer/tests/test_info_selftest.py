import json
import os

import pytest

from conftest import vlmgrpo
from vlmgrpo.info import collect_info

GPU_CHECKS = ["gpu.nvidia_smi", "gpu.cuda_available", "gpu.bf16_matmul", "gpu.nccl_allreduce", "gpu.flash_attn",
              "gpu.deepspeed_ops"]


def venv_expected() -> dict:
    """The versions of this environment, in imagegen's expected.json shape."""
    versions = collect_info()["versions"]
    expected = {key: versions[key] for key in ("torch", "torch_cuda", "cudnn", "nccl", "torchvision", "flash_attn",
                                               "deepspeed", "transformers", "trl", "accelerate", "peft")}
    expected["python"] = ".".join(versions["python"].split(".")[:2])
    expected["torch"] = expected["torch"].split("+")[0]
    expected["gpu_count"] = None
    return expected


def selftest(tmp_path, expected: dict, *flags):
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    result = vlmgrpo("selftest", "--expected", path, *flags)
    return result, {c["name"]: c for c in json.loads(result.stdout)["checks"]}, json.loads(result.stdout)


def test_info_prints_versions_and_hardware_as_json():
    result = vlmgrpo("info", check=True)
    info = json.loads(result.stdout)
    assert {"python", "torch", "torch_cuda", "cudnn", "nccl", "torchvision", "flash_attn", "deepspeed",
            "transformers", "trl", "accelerate", "peft"} <= set(info["versions"])
    assert info["versions"]["flash_attn"] is None or isinstance(info["versions"]["flash_attn"], str)
    assert info["hardware"]["cpu_count"] >= 1 and info["hardware"]["memory_bytes"] > 0
    assert isinstance(info["hardware"]["gpus"], list)


def test_selftest_skip_train_on_cpu_with_matching_versions(tmp_path):
    result, checks, report = selftest(tmp_path, venv_expected(), "--skip-train")
    versions = [name for name in checks if name.startswith("version.")]
    assert len(versions) == 12 and all(checks[name]["status"] == "pass" for name in versions), checks
    for name in GPU_CHECKS:
        assert checks[name] == {"name": name, "status": "skip", "detail": "no GPU visible"}
    assert checks["train.tiny_grpo"]["status"] == "skip"
    assert report["passed"] + report["failed"] + report["skipped"] == len(checks)
    if os.getuid() == 0:  # this sandbox runs tests as root; the image does not
        assert report["failed"] == 1 and checks["user.nonroot"]["status"] == "fail" and result.returncode == 1
    else:
        assert report["failed"] == 0 and result.returncode == 0


@pytest.mark.parametrize("key,value", [("torch", "2.0.0"), ("python", "3.9"), ("transformers", "4.57.0"),
                                       ("deepspeed", "0.19.8"), ("cudnn", "8.9.2.26"), ("flash_attn", "2.8.3")])
def test_selftest_mismatch_fails_that_check(tmp_path, key, value):
    from vlmgrpo.selftest import run_selftest

    expected = venv_expected()
    expected[key] = value
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    checks = {c["name"]: c for c in run_selftest(str(path), skip_train=True)["checks"]}
    if key == "cudnn" and checks["version.cudnn"]["status"] == "skip":
        pytest.skip("cudnn cannot be queried on this host")
    assert checks[f"version.{key}"]["status"] == "fail" and value in checks[f"version.{key}"]["detail"]
    others = [c for n, c in checks.items() if n.startswith("version.") and n != f"version.{key}"]
    assert all(c["status"] == "pass" for c in others)


def test_selftest_mismatch_exits_1(tmp_path):
    expected = venv_expected()
    expected["trl"] = "0.1.0"
    result, checks, report = selftest(tmp_path, expected, "--skip-train")
    assert result.returncode == 1 and checks["version.trl"]["status"] == "fail"


def test_selftest_without_expected_file_and_require_gpu(tmp_path):
    """No expected file: version checks skip with the path; --require-gpu without a GPU: GPU checks fail, exit 1."""
    result = vlmgrpo("selftest", "--expected", tmp_path / "absent.json", "--skip-train", "--require-gpu")
    assert result.returncode == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    versions = [c for name, c in checks.items() if name.startswith("version.")]
    assert len(versions) == 12 and all(c["status"] == "skip" and "absent.json" in c["detail"] for c in versions)
    assert all(checks[name]["status"] == "fail" and "no GPU visible" in checks[name]["detail"] for name in GPU_CHECKS)


def test_selftest_reads_imagegen_expected_env(tmp_path, monkeypatch):
    from vlmgrpo.selftest import expected_path

    monkeypatch.setenv("IMAGEGEN_EXPECTED", str(tmp_path / "e.json"))
    assert expected_path(None) == str(tmp_path / "e.json")
    monkeypatch.delenv("IMAGEGEN_EXPECTED")
    assert expected_path(None) == "/etc/imagegen/expected.json"


def test_version_comparison_rules():
    from vlmgrpo.info import cudnn_parts
    from vlmgrpo.selftest import same_public_version

    assert same_public_version("2.14.1+cu130", "2.14.1")
    assert not same_public_version("2.14.0", "2.14.1")
    assert cudnn_parts(92400) == (9, 24, 0) and cudnn_parts(8902) == (8, 9, 2)


def test_selftest_tiny_grpo_runs(tmp_path):
    result, checks, _ = selftest(tmp_path, venv_expected())
    assert checks["train.tiny_grpo"]["status"] == "pass", checks["train.tiny_grpo"]["detail"]
    print(checks["train.tiny_grpo"]["detail"])


def test_selftest_key_missing_from_expected_file_is_skipped(tmp_path):
    from vlmgrpo.selftest import run_selftest

    expected = venv_expected()
    del expected["peft"]
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    checks = {c["name"]: c for c in run_selftest(str(path), skip_train=True)["checks"]}
    assert checks["version.peft"]["status"] == "skip"
