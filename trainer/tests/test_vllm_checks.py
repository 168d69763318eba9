"""The vllm.* in-image checks: their logic on literal metadata and paths, and a clean skip where vLLM is absent."""

from vlmgrpo.checks import FAIL, PASS, SKIP, Context
from vlmgrpo.checks import vllm_runtime

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
    monkeypatch.setattr(vllm_runtime, "installed", lambda name: None if name == "vllm" else "2.14.1")
    expected = {"versions": {"torch": "2.14.1", "vllm": None}}
    results = vllm_runtime.run(Context(expected=expected))
    assert [(r["name"], r["status"]) for r in results] == [(name, SKIP) for name in vllm_runtime.NAMES]
    assert results[0]["detail"] == "no vLLM in this image (expected.json: vllm none)"
    assert vllm_runtime.run(Context(expected=None))[0]["detail"] == "vllm not installed"


def test_an_image_that_should_have_vllm_fails_when_it_does_not_import(monkeypatch):
    monkeypatch.setattr(vllm_runtime, "installed", lambda name: None if name == "vllm" else "2.13.0")
    monkeypatch.setattr(vllm_runtime, "nvcc_check", lambda: (PASS, "nvcc"))
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
