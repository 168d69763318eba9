"""The vllm.* in-image checks: their logic on literal metadata and paths, and a clean skip where vLLM is absent."""

import pytest

from vlmgrpo.image.checks import FAIL, PASS, SKIP, Context
from vlmgrpo.image.checks import vllm_runtime

VLLM_031 = ["transformers<5.18.0,>=5.10.4", "torch==2.13.0", "torchvision==0.28.0", "pandas; extra == 'bench'"]


def test_vllm_torch_pin_is_read_from_its_requirements_and_compared_with_the_installed_torch():
    assert vllm_runtime.torch_pin(VLLM_031) == "==2.13.0"
    assert vllm_runtime.torch_pin(["torch>=2.5; extra == 'bench'"]) is None  # an extra's torch is not vLLM's own
    assert vllm_runtime.torch_check(VLLM_031, "2.13.0") == (PASS, "vllm requires torch==2.13.0, the image has torch "
                                                                  "2.13.0")
    assert vllm_runtime.torch_check(VLLM_031, "2.13.0+cu130")[0] == PASS  # the PyTorch index's local build
    status, detail = vllm_runtime.torch_check(VLLM_031, "2.14.1")
    assert (status, detail) == (FAIL, "vllm requires torch==2.13.0, the image has torch 2.14.1")
    assert vllm_runtime.torch_check(VLLM_031, None) == (FAIL, "vllm requires torch==2.13.0; torch is not installed")
    assert vllm_runtime.torch_check(["numpy"], "2.13.0")[0] == SKIP


def test_nvcc_is_looked_for_where_torch_finds_cuda_home():
    there = {"/opt/cuda/bin/nvcc", "/usr/local/cuda/bin/nvcc"}.__contains__
    assert vllm_runtime.find_nvcc({"CUDA_HOME": "/opt/cuda"}, lambda _: None, there) == ("/opt/cuda/bin/nvcc",
                                                                                          "CUDA_HOME=/opt/cuda")
    # CUDA_HOME wins even when it is wrong, as it does for torch: the check says which one it read
    assert vllm_runtime.find_nvcc({"CUDA_HOME": "/nowhere"}, lambda _: "/usr/bin/nvcc", there) == (
        None, "CUDA_HOME=/nowhere")
    assert vllm_runtime.find_nvcc({}, lambda _: "/usr/bin/nvcc", there) == ("/usr/bin/nvcc", "PATH")
    assert vllm_runtime.find_nvcc({}, lambda _: None, there)[0] == "/usr/local/cuda/bin/nvcc"
    assert vllm_runtime.find_nvcc({}, lambda _: None, lambda _: False)[0] is None


def test_an_image_without_vllm_skips_every_vllm_check_with_the_reason(monkeypatch):
    import vlmgrpo.image.checks as checks

    monkeypatch.setattr(checks, "installed_version", lambda name: None if name == "vllm" else "2.14.1")
    monkeypatch.setattr(vllm_runtime, "run", lambda context: pytest.fail("a check ran where its component is absent"))
    no_gpu = lambda: (False, "no GPU visible")  # noqa: E731
    assert checks.unmet_need(vllm_runtime, Context(expected={"versions": {"torch": "2.14.1", "vllm": None}}), no_gpu) \
        == (SKIP, "no vllm in this image (expected.json: vllm none)")
    assert checks.unmet_need(vllm_runtime, Context(expected={"versions": {"torch": "2.14.1"}}), no_gpu) \
        == (SKIP, "no vllm in this image (expected.json does not name it)")
    assert checks.unmet_need(vllm_runtime, Context(expected=None), no_gpu) == (SKIP, "vllm not installed")
    assert checks.unmet_need(vllm_runtime, Context(expected={"versions": {"vllm": "0.31.0"}}), no_gpu) is None
    monkeypatch.setattr(checks, "discover", lambda: [vllm_runtime])
    results = checks.run_checks(Context(expected={"versions": {"vllm": None}}))
    assert [(r["name"], r["status"]) for r in results] == [(name, SKIP) for name in vllm_runtime.NAMES]


def test_whether_an_image_has_a_component_is_what_its_expected_file_names(monkeypatch):
    """As imagegen's label does on the host: one installed against the file is version.<key>'s failure, and its own
    checks do not run; without a file (outside an image) what is installed decides."""
    import vlmgrpo.image.checks as checks

    monkeypatch.setattr(checks, "installed_version", lambda name: "0.31.0" if name == "vllm" else None)
    assert checks.unmet_need(vllm_runtime, Context(expected={"versions": {"vllm": None}}), lambda: (False, "")) == \
        (SKIP, "no vllm in this image (expected.json: vllm none)")
    assert checks.unmet_need(vllm_runtime, Context(expected=None), lambda: (False, "")) is None


def test_an_image_that_should_have_vllm_fails_when_it_does_not_import(monkeypatch):
    monkeypatch.setattr(vllm_runtime, "installed", lambda name: None if name == "vllm" else "2.13.0")
    monkeypatch.setattr(vllm_runtime, "nvcc_check", lambda *_: (PASS, "nvcc"))
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)  # `import vllm` raises ImportError
    results = {r["name"]: r for r in vllm_runtime.run(Context(expected={"versions": {"vllm": "0.31.0"}}))}
    assert results["vllm.import"]["status"] == FAIL
    assert results["vllm.import"]["detail"].startswith("import vllm: ModuleNotFoundError")
    assert results["vllm.torch"]["status"] == SKIP  # no metadata to read its pin from


def test_the_version_vllm_reports_is_compared_with_the_images(monkeypatch):
    class FakeVllm:
        __version__ = "0.30.0"

    monkeypatch.setitem(__import__("sys").modules, "vllm", FakeVllm)
    assert vllm_runtime.import_check("0.31.0") == (FAIL, "vllm 0.30.0 imports, expected 0.31.0")
    assert vllm_runtime.import_check("0.30.0")[0] == PASS


def fake_nvcc(folder, compile_exit: int, message: str = ""):
    """An nvcc that reports its release and compiles (exit 0) or fails as nvcc does without a host compiler."""
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n"
                    'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi\n'
                    f'echo "{message}" >&2; exit {compile_exit}\n')
    nvcc.chmod(0o755)
    return {"CUDA_HOME": str(folder)}


def test_nvcc_passes_only_when_it_compiles_a_kernel(tmp_path):
    works = vllm_runtime.nvcc_check(fake_nvcc(tmp_path / "good", 0))
    assert works == (PASS, f"{tmp_path}/good/bin/nvcc (from CUDA_HOME={tmp_path}/good): Cuda compilation tools, "
                           "release 13.0, V13.0.88; compiles a kernel")
    status, detail = vllm_runtime.nvcc_check(fake_nvcc(tmp_path / "bad", 1, "sh: 1: g++: not found"))
    assert status == FAIL and detail.endswith("release 13.0, V13.0.88) cannot compile a kernel: sh: 1: g++: not found")
    status, detail = vllm_runtime.nvcc_check({"CUDA_HOME": str(tmp_path / "none")})
    assert status == FAIL and "CUDA_HOME at the folder of the nvidia-cuda-nvcc wheel" in detail
