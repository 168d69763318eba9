import functools
import json

import pytest

from conftest import ENV, in_process
from vlmgrpo.image.info import collect_info
from imagegen_contract.inventory import installed_version

GPU_CHECKS = ["gpu.nvidia_smi", "gpu.cuda_available", "gpu.bf16_matmul", "gpu.nccl_allreduce", "gpu.flash_attn",
              "gpu.deepspeed_ops"]
COMPONENT_OF = {"gpu.flash_attn": ("flash_attn", "flash-attn"), "gpu.deepspeed_ops": ("deepspeed", "deepspeed")}


def gpu_skip(name: str, versions: dict | None) -> str:
    """Why a GPU check is skipped here: its component is absent (in versions, else not installed), else no GPU."""
    key, distribution = COMPONENT_OF.get(name, (None, None))
    if key is None or (versions.get(key) if versions is not None else installed_version(distribution)):
        return "no GPU visible"
    return f"no {key} in this image (expected.json: {key} none)" if versions is not None else f"{distribution} not installed"


# imagegen writes expected.json from its table of components: each one's version, and the
# distribution it is read from. This environment's versions, in that shape.
DISTRIBUTIONS = {"torch": "torch", "torchvision": "torchvision", "flash_attn": "flash-attn", "deepspeed": "deepspeed",
                 "transformers": "transformers", "trl": "trl", "accelerate": "accelerate", "peft": "peft"}
VERSION_KEYS = ("python", "torch", "torch_cuda", "cudnn", "nccl", *list(DISTRIBUTIONS)[1:])


@functools.lru_cache(maxsize=1)
def _venv_versions() -> tuple:
    from imagegen_contract.inventory import installed_version

    versions = collect_info()["versions"]
    found = {key: versions.get(key) for key in ("torch_cuda", "cudnn", "nccl")}
    found.update({key: installed_version(name) for key, name in DISTRIBUTIONS.items()})
    found["python"] = ".".join(versions["python"].split(".")[:2])
    found["torch"] = found["torch"].split("+")[0]
    return tuple(found.items())


def venv_versions() -> dict:
    """This environment's versions in expected.json's shape (read once: the inventory takes about a second)."""
    return dict(_venv_versions())


def expected_file(versions: dict) -> dict:
    return {"versions": versions, "distributions": DISTRIBUTIONS, "gpu_count": None}


def selftest(tmp_path, versions: dict, *flags):
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected_file(versions)))
    result = in_process("selftest", "--expected", path, *flags)
    return result, {c["name"]: c for c in json.loads(result.stdout)["checks"]}, json.loads(result.stdout)


def test_info_prints_versions_and_hardware_as_json():
    """Outside an image: the runtime's versions and vlmgrpo's own requirements."""
    result = in_process("info", check=True)
    info = json.loads(result.stdout)
    assert {"python", "torch", "torch_cuda", "cudnn", "nccl", "transformers", "trl", "accelerate", "peft",
            "vlmgrpo"} <= set(info["versions"])
    assert info["hardware"]["cpu_count"] >= 1 and info["hardware"]["memory_bytes"] > 0
    assert isinstance(info["hardware"]["gpus"], list)


def test_info_reports_the_components_an_images_expected_file_names(tmp_path):
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"versions": {"flash_attn": "2.8.3", "pillow": "1.0"},
                                "distributions": {"flash_attn": "flash-attn", "pillow": "pillow"}}))
    versions = json.loads(in_process("info", check=True, env={**ENV, "IMAGEGEN_EXPECTED": str(path)}).stdout)["versions"]
    assert versions["flash_attn"] is None and versions["pillow"] == __import__("PIL").__version__


def test_selftest_skip_train_on_cpu_with_matching_versions(tmp_path):
    result, checks, report = selftest(tmp_path, venv_versions(), "--skip-train")
    names = [c["name"] for c in report["checks"]]
    assert len(names) == len(set(names)), names  # each check reported once
    versions = [name for name in checks if name.startswith(("version.", "torch."))]
    # no wheel family pins cuDNN or NCCL in this environment: torch tells them (torch.<key>), the inventory the rest
    assert sorted(versions) == sorted(f"torch.{key}" if key in ("cudnn", "nccl") else f"version.{key}"
                                      for key in VERSION_KEYS)
    assert all(checks[name]["status"] == "pass" for name in versions), checks
    for name in GPU_CHECKS:  # skipped without a GPU; those of a component this environment lacks, as not applicable
        assert checks[name] == {"name": name, "status": "skip", "detail": gpu_skip(name, venv_versions())}
    assert checks["train.tiny_grpo"]["status"] == "skip"
    assert report["passed"] + report["failed"] + report["skipped"] == len(checks)
    assert "user.nonroot" not in checks  # the image's USER is judged once, from the host (imagegen test)
    assert report["failed"] == 0 and result.returncode == 0


@pytest.mark.parametrize("key,value", [("torch", "2.0.0"), ("python", "3.9"), ("transformers", "4.57.0"),
                                       ("deepspeed", "0.19.8"), ("cudnn", "8.9.2.26"), ("flash_attn", "2.8.3")])
def test_selftest_mismatch_fails_that_check(key, value):
    """The version checks alone (test_selftest_mismatch_exits_1 runs them all): the others compile a kernel with the
    host's nvcc where there is one, 4 s a run here."""
    from vlmgrpo.image.checks import Context, run_checks, torch_libraries, versions as version_checks

    wanted = venv_versions()
    wanted[key] = value
    checks = {c["name"]: c for c in run_checks(Context(expected_file(wanted)), [version_checks, torch_libraries])}
    name = f"torch.{key}" if key in ("cudnn", "nccl") else f"version.{key}"  # no wheel family pins them here
    if checks[name]["status"] == "skip":
        pytest.skip(f"{key} cannot be queried on this host: {checks[name]['detail']}")
    assert checks[name]["status"] == "fail" and value in checks[name]["detail"]
    others = [c for n, c in checks.items() if n.startswith(("version.", "torch.")) and n != name]
    assert all(c["status"] == "pass" for c in others)


def test_selftest_mismatch_exits_1(tmp_path):
    versions = venv_versions()
    versions["trl"] = "0.1.0"
    result, checks, report = selftest(tmp_path, versions, "--skip-train")
    assert result.returncode == 1 and checks["version.trl"]["status"] == "fail"


def test_selftest_without_expected_file_and_require_gpu(tmp_path):
    """No expected file: the version check skips with the path; --require-gpu without a GPU: GPU checks fail."""
    result = in_process("selftest", "--expected", tmp_path / "absent.json", "--skip-train", "--require-gpu")
    assert result.returncode == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["version"]["status"] == "skip" and "absent.json" in checks["version"]["detail"]
    # cuDNN and NCCL as torch reports them (torch_libraries) need the file too: skipped for the same reason
    assert not [name for name in checks if name.startswith("version.")]
    assert checks["torch.cudnn"]["detail"] == checks["torch.nccl"]["detail"] == checks["version"]["detail"]
    for name in GPU_CHECKS:  # a check of a component that is not here does not apply, with or without --require-gpu
        why = gpu_skip(name, None)
        assert checks[name] == {"name": name, "status": "fail" if why == "no GPU visible" else "skip", "detail": why}


def test_selftest_reads_imagegen_expected_env(tmp_path, monkeypatch):
    from vlmgrpo.image.info import expected_path

    monkeypatch.setenv("IMAGEGEN_EXPECTED", str(tmp_path / "e.json"))
    assert expected_path(None) == str(tmp_path / "e.json")
    assert expected_path(str(tmp_path / "option.json")) == str(tmp_path / "option.json")
    monkeypatch.delenv("IMAGEGEN_EXPECTED")
    assert expected_path(None) is None  # imagegen owns where the file lies; the trainer assumes no path of its own


@pytest.mark.parametrize("key, inside, expected, families, same", [
    ("torch", "2.14.1+cu130", "2.14.1", (), True),
    ("torch", "2.14.0", "2.14.1", (), False),
    ("torch", "2.6", "2.6.0", (), True),  # PEP 440: trailing zeros of the release are one version
    ("vllm", "0.31.0rc1", "0.31.0", (), False),
    ("cudnn", "9.1.0", "9.1.0.70", (), True),  # torch reports three parts
    ("cudnn", "9.5.1", "9.1.0.70", (), False),
    ("cudnn", "9", "9.1.0.70", (), False),  # too short to say
    ("cudnn", "9.1.0.70", "9.1.0", ("cudnn",), True),  # the family's wheel, longer
    ("cudnn", "9.1.0.70, 9.2.0.1", "9.1.0", ("cudnn",), False),  # two of a family installed
    ("python", "3.11.9", "3.11", (), True),
    ("python", "3.12.1", "3.11", (), False),
    ("flash_attn", None, None, (), True),
    ("flash_attn", "2.8.3", None, (), False),
    ("deepspeed", None, "0.19.8", (), False),
])
def test_one_rule_judges_every_version(key, inside, expected, families, same):
    """inventory.version_matches: the one rule version.<key> judges by, inside the image."""
    from imagegen_contract.inventory import version_matches

    assert version_matches(key, inside, expected, families) is same


def test_the_inventory_judges_what_it_reads_against_the_expected_file():
    """Every key the file names is judged, but cuDNN and NCCL that no wheel family pins (torch_libraries reads them
    from torch); a key nothing says how to read fails."""
    from imagegen_contract.inventory import version_checks

    expected = {"versions": {"torch": "2.14.1", "cudnn": "9.1.0", "nccl": "2.21.5", "absent": None, "unread": "1.0"},
                "families": {"cudnn": "nvidia-"}}
    found = version_checks(expected, {"torch": "2.14.1+cu130", "cudnn": "9.1.0.70", "absent": None,
                                      "python": "3.11.9"})
    assert found == [{"name": "version.torch", "status": "pass", "detail": "torch 2.14.1+cu130, expected 2.14.1"},
                     {"name": "version.cudnn", "status": "pass", "detail": "cudnn 9.1.0.70, expected 9.1.0"},
                     {"name": "version.absent", "status": "pass", "detail": "absent absent, as expected"},
                     {"name": "version.unread", "status": "fail",
                      "detail": "the expected file names no distribution for unread"}]


def test_selftest_skip_versions_leaves_the_inventorys_verdict_to_imagegen_test(tmp_path):
    """imagegen test reports version.<key> from the inventory it runs itself: the selftest it asks leaves them out,
    saying why, and keeps cuDNN and NCCL as torch reports them (no wheel family pins them here)."""
    versions = venv_versions()
    versions["trl"] = "0.1.0"  # would fail version.trl
    result, checks, _ = selftest(tmp_path, versions, "--skip-train", "--skip-versions")
    assert checks["version"]["status"] == "skip" and "--skip-versions" in checks["version"]["detail"]
    assert not [name for name in checks if name.startswith("version.")]
    assert checks["torch.cudnn"]["status"] in ("pass", "skip") and checks["torch.nccl"]["status"] in ("pass", "skip")
    assert result.returncode == 0, checks


def test_cudnn_parts_are_read_from_torchs_number():
    from vlmgrpo.image.info import cudnn_parts

    assert cudnn_parts(92400) == (9, 24, 0) and cudnn_parts(8902) == (8, 9, 2)


@pytest.mark.slow
def test_selftest_tiny_grpo_runs(tmp_path):
    result, checks, _ = selftest(tmp_path, venv_versions())
    assert checks["train.tiny_grpo"]["status"] == "pass", checks["train.tiny_grpo"]["detail"]
    print(checks["train.tiny_grpo"]["detail"])


def test_selftest_checks_what_the_expected_file_names_and_nothing_else(tmp_path):
    from vlmgrpo.image.selftest import run_selftest

    versions = venv_versions()
    del versions["peft"]
    versions["pillow"] = "0.0.1"
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({**expected_file(versions), "distributions": {**DISTRIBUTIONS, "pillow": "pillow"}}))
    checks = {c["name"]: c for c in run_selftest(str(path), skip_train=True)["checks"]}
    assert "version.peft" not in checks
    assert checks["version.pillow"]["status"] == "fail" and "expected 0.0.1" in checks["version.pillow"]["detail"]


def test_an_expected_file_in_the_old_shape_is_one_failing_check(tmp_path):
    from vlmgrpo.image.selftest import run_selftest

    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"torch": "2.6.0"}))
    checks = {c["name"]: c for c in run_selftest(str(path), skip_train=True)["checks"]}
    assert checks["version"]["status"] == "fail" and "does not hold imagegen's" in checks["version"]["detail"]
