"""The in-image audits that need no GPU, and the driver check the entrypoint runs at start."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlmgrpo.image import driver
from vlmgrpo.image.checks import Context, _needs, abi_extensions, cuda_archs, cuda_duplicates, result, run_checks
from vlmgrpo.image.selftest import run_selftest

# The subprocesses run the vlmgrpo these tests import, wherever another one is installed.
SOURCE = str(Path(driver.__file__).resolve().parents[1])
PROC_TEXT = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
             "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


@pytest.mark.parametrize("flags, arch, covered", [
    (["sm_80", "sm_90"], "8.6", True),  # a sm_80 cubin runs on later minors of Ampere
    (["sm_80", "sm_90"], "7.5", False),
    (["sm_75", "compute_75"], "9.0", True),  # PTX compiles on the fly for newer GPUs
    (["sm_90a"], "9.0", False),  # arch-specific code runs on that one GPU family only
    (["sm_86"], "8.0", False),
    (["sm_100", "sm_120"], "12.0", True),
])
def test_arch_coverage(flags, arch, covered):
    assert cuda_archs.covers(flags, arch) is covered


def test_archs_check_names_what_torch_lacks(monkeypatch):
    import torch

    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: "sm_80 sm_90")
    assert cuda_archs.archs_check({"cuda_archs": ["8.0", "8.6", "9.0"]})[0] == "pass"
    status, detail = cuda_archs.archs_check({"cuda_archs": ["7.0", "8.0", "10.0"]})
    assert status == "fail" and detail == "torch is built for sm_80 sm_90, which does not run on 7.0, 10.0"
    monkeypatch.setattr(torch._C, "_cuda_getArchFlags", lambda: None)  # a CPU-only torch: the runner skips the check
    cpu_torch = run_checks(Context(expected={"cuda_archs": ["8.0"]}), modules=[cuda_archs])
    assert cpu_torch == [result("cuda.archs", "skip", f"torch {torch.__version__} is a CPU-only build; the CUDA "
                                                      "architectures do not apply")]
    cpu_image = run_checks(Context(expected={"cuda_archs": []}), modules=[cuda_archs])  # the runner decides, by NEEDS
    assert cpu_image == [result("cuda.archs", "skip", "the matrix lists no CUDA architectures for this image")]


def test_every_compiled_file_of_torchvision_loads_and_a_broken_one_names_its_symbol(tmp_path):
    status, detail = abi_extensions.extensions_check()
    assert status == "pass" and "torchvision/" in detail
    source = tmp_path / "broken.c"
    source.write_text("extern void imagegen_missing_symbol(void);\nvoid use(void) { imagegen_missing_symbol(); }\n")
    library = tmp_path / "broken.so"
    compiled = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True)
    if compiled.returncode:
        pytest.skip(f"no C compiler to make a broken extension: {compiled.stderr.decode()[:200]}")
    assert abi_extensions.load_extension(str(library)) == "undefined symbol imagegen_missing_symbol"


def test_cuda_libraries_twice_are_listed_with_their_bytes(tmp_path, monkeypatch):
    base, wheel = tmp_path / "cuda" / "lib64", tmp_path / "nvidia" / "cublas" / "lib"
    for directory, size in ((base, 3_000_000), (wheel, 2_000_000)):
        directory.mkdir(parents=True)
        (directory / "libcublas.so.12").write_bytes(b"\0" * size)
    (base / "libcurl.so.4").write_bytes(b"\0" * 10)  # not CUDA, though it starts with libcu
    monkeypatch.setattr(cuda_duplicates, "wheel_library_dirs", lambda: [str(wheel)])
    status, detail = cuda_duplicates.duplicates_check([str(base)])
    assert status == "pass"
    assert detail == "1 CUDA libraries twice, at least 2 MB duplicated: libcublas 3 MB in the base + 2 MB in a wheel"
    assert cuda_duplicates.library_bytes([str(base)]) == {"libcublas": 3_000_000}
    monkeypatch.setattr(_needs, "BASE_CUDA_DIRS", (str(tmp_path / "none"),))  # a base without CUDA: the runner skips
    monkeypatch.setattr(_needs, "wheel_library_dirs", lambda: [str(wheel)])
    assert run_checks(Context(expected=None), modules=[cuda_duplicates]) == [result(
        "audit.cuda_duplicates", "skip", f"no CUDA library in the base image ({tmp_path / 'none'}); torch's nvidia-* "
        "wheels hold 2 MB")]


def test_cudnn_in_the_base_beside_torchs_wheel_fails_saying_which_base_to_use(tmp_path, monkeypatch):
    base, wheel = tmp_path / "usr" / "lib", tmp_path / "nvidia" / "cudnn" / "lib"
    for directory, size in ((base, 4_000_000), (wheel, 5_000_000)):
        directory.mkdir(parents=True)
        (directory / "libcudnn_ops.so.9").write_bytes(b"\0" * size)
        (directory / "libcublas.so.12").write_bytes(b"\0" * 1_000_000)
    monkeypatch.setattr(cuda_duplicates, "wheel_library_dirs", lambda: [str(wheel)])
    status, detail = cuda_duplicates.duplicates_check([str(base)])
    assert status == "fail"
    assert detail.startswith("libcudnn_ops both in the base image and in torch's wheels, which torch loads: 4 MB of "
                             "the base's are never used; build on the base's tag without cuDNN")
    (base / "libcudnn_ops.so.9").unlink()  # the toolkit's cuBLAS beside torch's: the price of nvcc, listed
    assert cuda_duplicates.duplicates_check([str(base)])[0] == "pass"


def test_selftest_reports_the_audits(tmp_path):
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps({"cuda_archs": []}))
    checks = {c["name"]: c for c in run_selftest(str(expected), skip_train=True)["checks"]}
    assert checks["abi.extensions"]["status"] == "pass"
    assert checks["cuda.archs"]["status"] == "skip"
    assert checks["audit.cuda_duplicates"]["status"] in ("pass", "skip")


def test_driver_version_is_read_from_the_kernel_module_line():
    assert driver.found_driver(PROC_TEXT) == "535.104.05"
    assert driver.found_driver("garbage") is None


@pytest.mark.parametrize("needed, found, says", [
    ("525.60.13", "535.104.05", None),
    ("580", "580.95.05", None),
    ("580", "575.57.08", "error: this image needs NVIDIA driver 580 or newer; the host has 575.57.08."),
    ("525.60.13", "525.60.12", "error: this image needs NVIDIA driver 525.60.13 or newer; the host has 525.60.12."),
    (None, "470.82.01", None),  # a CPU image needs none
])
def test_driver_problem(needed, found, says):
    line = driver.problem(needed, found)
    assert line == says if says is None else line.startswith(says)


@pytest.mark.parametrize("needed, found, branches, says", [
    ("570", "535.104.05", ("470", "535", "550"), None),  # a datacenter GPU runs it through the image's cuda-compat
    ("570", "570.86.10", ("470", "535"), None),
    ("570", "545.29.06", ("470", "535"), "error: this image needs NVIDIA driver 570 or newer (on a datacenter GPU also "
     "R470, R535, through the image's CUDA forward-compatibility package); the host has 545.29.06."),
    ("525.60.13", "470.82.01", (), "error: this image needs NVIDIA driver 525.60.13 or newer; the host has 470.82.01."),
])
def test_driver_problem_on_the_datacenter_branches_of_an_nvidia_cuda_base(needed, found, branches, says):
    line = driver.problem(needed, found, branches)
    assert line == says if says is None else line.startswith(says)


def test_the_requirement_is_the_expected_files_versioned_driver_entry():
    entry = {"format": 1, "cuda": "12.8", "min_driver": "570", "datacenter_branches": ["535", "550"],
             "compat_package": True}
    assert driver.requirement({"driver": entry, "min_driver": "1"}) == ("570", ("535", "550"))
    assert driver.requirement({"min_driver": "580"}) == ("580", ())  # an image made before the entry
    assert driver.requirement({"driver": None}) == (None, ())  # no CUDA: nothing to compare
    assert driver.requirement({"driver": {**entry, "format": 2}}) == (None, ())  # a format it does not know
    assert driver.requirement({"driver": {**entry, "min_driver": 570}}) == (None, ())  # nor a shape it does not know
    assert driver.requirement({"min_driver": "r580"}) == (None, ())  # not a version: nothing to compare with


def test_the_driver_check_reads_the_driver_entry_imagegen_writes(tmp_path):
    version_file, expected = tmp_path / "version", tmp_path / "expected.json"
    version_file.write_text(PROC_TEXT)  # 535.104.05
    entry = {"format": 1, "cuda": "13.2", "min_driver": "595", "datacenter_branches": ["535", "570"],
             "compat_package": True}
    env = {"IMAGEGEN_EXPECTED": str(expected), "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE}
    for branches, code in ((["535", "570"], 0), (["570"], 1)):
        expected.write_text(json.dumps({"driver": {**entry, "datacenter_branches": branches}}))
        result = subprocess.run([sys.executable, "-m", "vlmgrpo.image.driver", str(version_file)], capture_output=True,
                                text=True, env=env)
        assert result.returncode == code and len(result.stderr.splitlines()) == code, result.stderr
    assert result.stderr.startswith("error: this image needs NVIDIA driver 595 or newer (on a datacenter GPU also R570")


def test_the_driver_check_is_one_line_and_exit_1(tmp_path):
    version_file, expected = tmp_path / "version", tmp_path / "expected.json"
    version_file.write_text(PROC_TEXT)
    expected.write_text(json.dumps({"min_driver": "580"}))
    result = subprocess.run([sys.executable, "-m", "vlmgrpo.image.driver", str(version_file)], capture_output=True,
                            text=True, env={"IMAGEGEN_EXPECTED": str(expected), "PATH": "/usr/bin:/bin",
                                            "PYTHONPATH": SOURCE})
    assert result.returncode == 1
    assert result.stderr == ("error: this image needs NVIDIA driver 580 or newer; the host has 535.104.05. "
                             "Update the host's driver, or use an image built for an older CUDA\n")
    expected.write_text(json.dumps({"min_driver": "525.60.13"}))
    ok = subprocess.run([sys.executable, "-m", "vlmgrpo.image.driver", str(version_file)], capture_output=True, text=True,
                        env={"IMAGEGEN_EXPECTED": str(expected), "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE})
    assert (ok.returncode, ok.stderr) == (0, "")


def test_the_driver_check_without_an_expected_file_compares_nothing(tmp_path):
    """The expected file's path comes from IMAGEGEN_EXPECTED only (the image sets it): without it, no minimum."""
    version_file = tmp_path / "version"
    version_file.write_text(PROC_TEXT)
    result = subprocess.run([sys.executable, "-m", "vlmgrpo.image.driver", str(version_file)], capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE})
    assert (result.returncode, result.stderr) == (0, "")
