"""vlmgrpo.image.checks: one module per in-image check, found by discovery, each with the same small interface."""

import json
import sys
from types import SimpleNamespace

import pytest

from conftest import fake_distribution
from vlmgrpo.image import checks
from vlmgrpo.image.selftest import run_selftest

# Checks that must stay, in the order the report shows them (a new check may come anywhere between them).
REPORT_ORDER = ["version", "abi.extensions", "cuda.archs", "audit.cuda_duplicates", "net.infiniband",
                "cuda.kernel", "cuda.deepspeed_op", "vllm.import", "vllm.torch", "vllm.nvcc",
                "gpu.nvidia_smi", "gpu.bf16_matmul", "gpu.cuda_available", "gpu.deepspeed_ops", "gpu.flash_attn",
                "gpu.nccl_allreduce", "train.tiny_grpo"]


def test_every_check_module_has_the_interface_and_the_report_keeps_its_names_and_order(tmp_path):
    modules = checks.discover()
    for module in modules:
        assert isinstance(module.NAMES, tuple) and module.NAMES, module.__name__
        assert module.PHASE in checks.PHASES and callable(module.run)
        assert isinstance(module.NEEDS, tuple) and all(isinstance(need, str) for need in module.NEEDS)
    assert [checks.place(module) for module in modules] == sorted(checks.place(module) for module in modules)
    names = [name for module in modules for name in module.NAMES]
    assert len(names) == len(set(names)), names
    assert [name for name in names if name in REPORT_ORDER] == REPORT_ORDER
    report = run_selftest(str(tmp_path / "absent.json"), skip_train=True)
    assert [c["name"] for c in report["checks"]] == names
    assert all(set(c) == {"name", "status", "detail"} for c in report["checks"])


DROPPED_IN = '''
from vlmgrpo.image.checks import PASS, result

NAMES = ("custom.{name}",)
PHASE = "{phase}"
NEEDS = {needs}


def run(context):
    {body}
'''


@pytest.fixture
def dropped_in(tmp_path, monkeypatch):
    """Drop check modules into the package (its __path__ extended by a directory, as a new file in it would be)."""
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path)])

    def drop(name, phase, needs=(), body="return [result('custom.' + __name__.rsplit('.', 1)[1], PASS, 'ran')]"):
        (tmp_path / f"{name}.py").write_text(DROPPED_IN.format(name=name, phase=phase, needs=needs, body=body))
        monkeypatch.delitem(sys.modules, f"vlmgrpo.image.checks.{name}", raising=False)

    yield drop
    for module in [m for m in sys.modules if m.startswith("vlmgrpo.image.checks.custom_")]:
        del sys.modules[module]


def test_a_module_dropped_into_the_package_is_a_check(dropped_in, tmp_path):
    dropped_in("custom_hello", phase="libraries")
    dropped_in("custom_needs_gpu", phase="gpu", needs=("gpu",), body="raise AssertionError('ran without a GPU')")
    dropped_in("custom_needs_absent", phase="gpu", needs=("vllm", "gpu"),  # a component this environment lacks
               body="raise AssertionError('ran in an image without its component')")
    dropped_in("custom_needs_misspelt", phase="gpu", needs=("vlm", "gpu"),  # fails: never a silent skip for good
               body="raise AssertionError('ran with a need nobody judges')")
    dropped_in("custom_broken", phase="gpu", body="raise RuntimeError('its library is broken')")
    report = run_selftest(str(tmp_path / "absent.json"), skip_train=True)
    names = [c["name"] for c in report["checks"]]
    assert names.index("audit.cuda_duplicates") < names.index("custom.custom_hello") < names.index("gpu.nvidia_smi")
    found = {c["name"]: c for c in report["checks"]}
    assert found["custom.custom_hello"] == {"name": "custom.custom_hello", "status": "pass", "detail": "ran"}
    if found["gpu.nvidia_smi"]["status"] == "skip":  # no GPU here: the GPU check is skipped without being run
        assert found["custom.custom_needs_gpu"] == {"name": "custom.custom_needs_gpu", "status": "skip",
                                                    "detail": "no GPU visible"}
    assert found["custom.custom_needs_absent"] == {  # attached by what the image has: not applicable, even for --require-gpu
        "name": "custom.custom_needs_absent", "status": "skip", "detail": "vllm not installed"}
    misspelt = found["custom.custom_needs_misspelt"]
    assert misspelt["status"] == "fail" and "custom_needs_misspelt needs 'vlm', which is neither" in misspelt["detail"]
    assert found["custom.custom_broken"] == {"name": "custom.custom_broken", "status": "fail",
                                             "detail": "RuntimeError: its library is broken"}
    assert names[-1] == "train.tiny_grpo"  # a broken check hides no other


@pytest.mark.slow
def test_a_wheel_family_is_checked_by_its_installed_distribution(tmp_path, monkeypatch):
    fake_distribution(tmp_path / "site", "imagegen-fake-cudnn-cu12", "9.1.0.70")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    expected = tmp_path / "expected.json"

    def check(version):
        expected.write_text(json.dumps({"versions": {"cudnn": version}, "families": {"cudnn": "imagegen-fake-cudnn-cu"}}))
        return next(c for c in run_selftest(str(expected), skip_train=True)["checks"] if c["name"] == "version.cudnn")

    assert check("9.1.0") == {"name": "version.cudnn", "status": "pass", "detail": "cudnn 9.1.0.70, expected 9.1.0"}
    assert check("9.2.0")["status"] == "fail"
    assert check(None) == {"name": "version.cudnn", "status": "fail", "detail": "cudnn 9.1.0.70 installed, expected "
                                                                                  "absent"}


def test_infiniband_is_skipped_without_a_device_and_needs_libibverbs_with_one(tmp_path, monkeypatch):
    from vlmgrpo.image.checks import Context, _needs, net_infiniband

    context = Context(expected=None)
    monkeypatch.setattr(_needs, "RDMA_DEVICES", str(tmp_path / "none"))
    [found] = checks.run_checks(context, modules=[net_infiniband])  # the runner decides, by NEEDS
    assert found["status"] == "skip" and "NCCL uses TCP sockets" in found["detail"]
    assert "; libibverbs.so.1 loads" in found["detail"] or "; libibverbs.so.1 does not load" in found["detail"]
    (tmp_path / "infiniband" / "mlx5_0").mkdir(parents=True)
    monkeypatch.setattr(_needs, "RDMA_DEVICES", str(tmp_path / "infiniband"))
    monkeypatch.setattr(_needs, "RDMA_LIBRARY", "libibverbs-missing.so.1")
    [found] = checks.run_checks(context, modules=[net_infiniband])
    assert found["status"] == "fail" and "mlx5_0" in found["detail"] and "install ibverbs-providers" in found["detail"]


def test_the_toolkit_checks_skip_without_a_toolkit_and_compile_for_the_newest_arch_of_the_image(tmp_path):
    from vlmgrpo.image.checks import cuda_deepspeed_op, cuda_toolkit

    nowhere = {"CUDA_HOME": str(tmp_path / "no-cuda"), "PATH": str(tmp_path)}
    with_deepspeed = {"versions": {"deepspeed": "0.19.8"}}  # the toolkit, not the component, is what is missing
    found = checks.run_checks(checks.Context(expected=with_deepspeed, environ=nowhere),
                              modules=[cuda_toolkit, cuda_deepspeed_op])
    assert [r["name"] for r in found] == ["cuda.kernel", "cuda.deepspeed_op"]
    assert all(r["status"] == "skip" and r["detail"].startswith("no CUDA toolkit in this image (CUDA_HOME=")
               for r in found), found
    assert cuda_toolkit.target_arch({"cuda_archs": ["7.5", "9.0", "12.0"]}) == "12.0"
    assert cuda_toolkit.target_arch({"cuda_archs": []}) == cuda_toolkit.DEFAULT_ARCH


def test_a_toolkit_whose_nvcc_fails_fails_the_kernel_check_with_its_last_line(tmp_path):
    from vlmgrpo.image.checks import cuda_toolkit

    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'cannot find -lcudart' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    status, detail = cuda_toolkit.kernel_check(str(nvcc), "9.0", {"PATH": "/usr/bin:/bin"})
    assert status == "fail" and detail.endswith("cannot compile and link a kernel: cannot find -lcudart"), detail


def test_every_check_module_reports_only_the_names_it_declares():
    """A report's names are the modules' NAMES (a family's name then a dot: version.torch under "version"), so the
    names a module declares for its skips and failures are the ones it reports when it runs."""
    expected = {"versions": {"python": "{}.{}.{}".format(*sys.version_info[:3]), "torch": "2.14.1", "cudnn": "9"}}
    for module in checks.discover():
        found = checks.run_checks(checks.Context(expected=expected, skip_train=True), modules=[module])
        assert found and checks.reported_outside(module, found) == [], module.__name__


# The modules whose own results may say "skip": one result of a family or a key, the module itself applying (version:
# cudnn/nccl torch cannot query without a driver; vllm.torch: a vLLM whose metadata pins no torch). Whether a module
# applies at all is the runner's, by NEEDS.
SKIPS_A_RESULT = ("vlmgrpo.image.checks.torch_libraries", "vlmgrpo.image.checks.vllm_runtime")


def test_no_check_module_decides_for_itself_whether_it_applies():
    for module in checks.discover():
        says_skip = "SKIP" in vars(module) or '"skip"' in open(module.__file__).read()
        assert says_skip == (module.__name__ in SKIPS_A_RESULT), module.__name__


def test_a_name_a_module_does_not_declare_is_found():
    module = SimpleNamespace(NAMES=("custom.declared", "version"))
    found = [checks.result(name, "pass", "") for name in ("custom.declared", "version.torch", "custom.stray",
                                                          "versionless")]
    assert checks.reported_outside(module, found) == ["custom.stray", "versionless"]
