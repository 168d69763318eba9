"""`imagegen facts check`: wheel names of both forms, sources, --strict, and the checks PyPI answers.

The unit tests serve literal wheel names and metadata from a made-up index (no network); the network-marked
ones read PyPI itself, on copies of the tests' matrix with one fact made wrong.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from imagegen.locking import index, wheelnames
from imagegen.matrix import model

from tests.helpers import FIXTURE, MATRIX_PATH, fixture_data, image_named, write_matrix
from tests.test_cli import imagegen, on

PYTORCH_INDEX_WHEEL = "torch-2.4.1+cu118-cp311-cp311-linux_x86_64.whl"  # the PyTorch index's older form
PYPI_WHEEL = "torch-2.4.1-cp311-cp311-manylinux1_x86_64.whl"
NEW_WHEEL = "torch-2.6.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl"


@pytest.mark.parametrize("filename, platforms, python, cxx11", [
    (PYTORCH_INDEX_WHEEL, {"linux_x86_64"}, "3.11", False),
    (PYPI_WHEEL, {"manylinux1_x86_64"}, "3.11", False),
    ("torch-2.4.1-cp311-cp311-manylinux2014_x86_64.whl", {"manylinux2014_x86_64"}, "3.11", False),
    (NEW_WHEEL, {"manylinux_2_28_x86_64"}, "3.12", True),
    ("torch-2.10.0-3-cp311-cp311-manylinux_2_28_x86_64.whl", {"manylinux_2_28_x86_64"}, "3.11", True),  # build tag
    ("torch-2.9.1-cp312-cp312-manylinux_2_28_aarch64.whl", set(), "3.12", None),
    ("torch-2.5.1-cp39-none-macosx_11_0_arm64.whl", set(), "3.9", None),
    ("torch-2.5.1-cp39-cp39-win_amd64.whl", set(), "3.9", None),
    ("einops-0.8.0-py3-none-any.whl", set(), None, None),
    ("flash_attn-2.7.0.post2.tar.gz", set(), None, None),
])
def test_wheel_names_of_both_forms_are_linux_wheels_with_their_python_and_abi(filename, platforms, python, cxx11):
    assert wheelnames.linux_platforms(filename) == platforms
    assert wheelnames.python_of(filename) == python
    assert wheelnames.cxx11_abi(filename) is cxx11


def test_aarch64_wheel_names_of_both_forms():
    assert wheelnames.linux_platforms("torch-2.4.1-cp311-cp311-linux_aarch64.whl", "aarch64") == {"linux_aarch64"}
    assert wheelnames.linux_platforms("torch-2.9.1-cp312-cp312-manylinux_2_28_aarch64.whl", "aarch64") \
        == {"manylinux_2_28_aarch64"}
    assert wheelnames.cxx11_abi("torch-2.9.1-cp312-cp312-manylinux_2_28_aarch64.whl", "aarch64") is True


CU118_PINS = ["nvidia-cudnn-cu11==9.1.0.70; platform_system == 'Linux' and platform_machine == 'x86_64'",
              "nvidia-nccl-cu11==2.20.5; platform_system == 'Linux' and platform_machine == 'x86_64'",
              "nvidia-cuda-runtime-cu11==11.8.89; platform_system == 'Linux' and platform_machine == 'x86_64'"]


def file(name: str, url: str) -> index.IndexFile:
    return index.IndexFile(name, f"{url}/{name}", "0" * 64, ">=3.8", True)


@pytest.fixture
def made_up_index(monkeypatch):
    """torch 2.4.1's cu118 build on a PyTorch index that serves `linux_x86_64` wheels, and torchvision's; what
    the test puts in `answers` by (index, project) is served, anything else is an index that does not answer."""
    answers: dict[tuple[str, str], list[index.IndexFile]] = {}
    metadata: dict[str, list[str]] = {}

    def project_files(index_url, project):
        if (index_url, project) not in answers:
            raise index.PackageIndexError(f"cannot reach {index_url}: made up")
        return answers[index_url, project]

    monkeypatch.setattr(index, "project_files", project_files)
    monkeypatch.setattr(index, "wheel_metadata", lambda f: {"Requires-Dist": metadata[f.filename]})
    cu118 = "https://download.pytorch.org/whl/cu118"
    answers[cu118, "torch"] = [file(f"torch-2.4.1+cu118-cp3{m}-cp3{m}-linux_x86_64.whl", cu118) for m in range(8, 13)]
    answers[cu118, "torchvision"] = [file("torchvision-0.19.1+cu118-cp311-cp311-linux_x86_64.whl", cu118)]
    for wheel in answers[cu118, "torch"]:
        metadata[wheel.filename] = CU118_PINS
    metadata["torchvision-0.19.1+cu118-cp311-cp311-linux_x86_64.whl"] = ["torch==2.4.1"]
    pypi = "https://pypi.org/simple"  # the toolkit release of each of the fixture's CUDA lines, and none newer
    answers[pypi, "cuda-toolkit"] = [file(f"cuda_toolkit-{cuda['version']}-py2.py3-none-any.whl", pypi)
                                     for cuda in fixture_data()["cuda"].values()]
    return answers


def one_build_matrix(tmp_path, edit=None):
    """The fixture's torch 2.4.1 with its cu118 build alone (PyPI's build named but not listed), no images."""
    data = fixture_data()
    data["torch"] = {"2.4.1": {**data["torch"]["2.4.1"], "builds": {"11.8": {}}}}
    data["packages"], data["flash_attn"], data["images"] = {}, {}, []
    if edit:
        edit(data)
    return write_matrix(tmp_path, data)


def test_the_pytorch_index_s_linux_x86_64_wheels_are_compared_not_called_missing(tmp_path, made_up_index):
    result = imagegen("facts", "check", *on(one_build_matrix(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "0 disagree, 0 not checked" in result.stdout
    wrong = one_build_matrix(tmp_path, lambda d: d["torch"]["2.4.1"]["builds"]["11.8"].update(nccl="2.21.5"))
    result = imagegen("facts", "check", *on(wrong))
    assert result.returncode == 1
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert ("torch.2.4.1.builds.11.8.nccl: the index says 2.20.5 (torch-2.4.1+cu118-cp312-cp312-linux_x86_64.whl "
            "pins nvidia-nccl-cu*), the matrix says 2.21.5 [facts]") in error


def test_an_index_that_does_not_answer_names_the_fact_s_source_and_strict_fails(tmp_path, made_up_index):
    made_up_index.clear()
    path = one_build_matrix(tmp_path)
    result = imagegen("facts", "check", *on(path))
    assert result.returncode == 0  # nothing disagrees
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("not checked: torch 2.4.1+cu118")]
    assert "and the matrix gives no source: add `source:` at " in line and ": torch.2.4.1.builds.11.8" in line
    assert "2 not checked (1 of them without a source)" in result.stdout  # and cuda-toolkit's releases
    strict = imagegen("facts", "check", "--strict", *on(path))
    assert strict.returncode == 1 and "--strict fails while any is not checked" in strict.stdout
    source = "https://github.com/pytorch/pytorch/blob/v2.4.1/.github/scripts/generate_binary_build_matrix.py"
    sourced = one_build_matrix(tmp_path, lambda d: d["torch"]["2.4.1"].update(source=source))
    result = imagegen("facts", "check", *on(sourced))
    assert f"the matrix's source: {source}" in result.stderr and "(0 of them without a source)" in result.stdout


def test_a_source_is_accepted_on_a_torch_release_a_build_and_a_flash_attn_release():
    data = fixture_data()
    data["torch"]["2.6.0"]["source"] = "pytorch/pytorch .github/scripts/generate_binary_build_matrix.py@v2.6.0"
    data["torch"]["2.6.0"]["builds"]["12.6"]["source"] = "the v2.6.0 release notes"
    data["flash_attn"]["2.6.3"]["source"] = "https://github.com/Dao-AILab/flash-attention/releases/tag/v2.6.3"
    matrix = model.parse(yaml.safe_dump(data), "matrix.yaml")
    assert matrix.torch["2.6.0"].builds["12.6"].source == "the v2.6.0 release notes"
    assert matrix.torch["2.6.0"].builds["11.8"].source.endswith("@v2.6.0")  # the release's, where a build says none
    assert matrix.flash_attn["2.6.3"].source.endswith("v2.6.3")


def facts_matrix(tmp_path, edit) -> str:
    """The tests' matrix cut down to what a check reads from PyPI, with no torch facts unless the edit adds some."""
    data = fixture_data()
    data["torch"], data["packages"], data["flash_attn"] = {}, {}, {}
    edit(data)
    return str(write_matrix(tmp_path, data))


@pytest.mark.network
def test_an_image_pin_an_extra_of_its_stack_refuses_fails_the_check(tmp_path):
    """TRL 1.16's `deepspeed` extra needs DeepSpeed >= 0.18.6: an image pairing it with 0.16.9 is a disagreement."""
    def old_deepspeed(data):
        image = {**image_named(data, "cu124-torch2.6"), "deepspeed": "0.16.9"}
        data["images"] = [image]

    result = imagegen("facts", "check", *on(facts_matrix(tmp_path, old_deepspeed)))
    assert result.returncode == 1, result.stdout + result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "images[0].deepspeed: the index says trl 1.16.0[deepspeed] requires deepspeed>=0.18.6, the image " \
           "pins 0.16.9 [facts]" in error


@pytest.mark.network
def test_pypi_s_aarch64_torch_is_cpu_only_through_2_10(tmp_path):
    def arm64_2_10(data):
        data["torch"] = {"2.10.0": {"builds": {"12.8": {"platforms": ["linux/amd64", "linux/arm64"]}},
                                    "pypi_build": "12.8", "python": ">=3.10,<3.15", "cudnn": "9.10.2.21",
                                    "nccl": "2.27.5", "torchvision": "0.25.0", "cxx11_abi": True}}
        data["images"] = []

    result = imagegen("facts", "check", *on(facts_matrix(tmp_path, arm64_2_10)))
    assert result.returncode == 1
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "torch.2.10.0.builds.12.8.platforms: the index says CPU-only aarch64 wheels (" in error


@pytest.mark.network
@pytest.mark.slow  # two reads of torch's whole file list on PyPI
def test_the_cpu_image_carries_the_cuda_of_pypi_s_torch_on_both_platforms(tmp_path):
    """PyPI's torch 2.14.1 is its CUDA 13.0 build, CUDA libraries and all, on amd64 and arm64: what the cpu
    image's labels say. A matrix that called it a CUDA 12.6 build is wrong twice."""
    def pypi_build(cuda):
        def edit(data):
            data["torch"] = {"2.14.1": {**fixture_data()["torch"]["2.14.1"], "builds": {cuda: {}}, "pypi_build": cuda}}
            data["images"] = [image_named(data, "cpu")]
        return edit

    right = imagegen("facts", "check", *on(facts_matrix(tmp_path, pypi_build("13.0"))))
    assert right.returncode == 0, right.stderr
    wrong = imagegen("facts", "check", *on(facts_matrix(tmp_path, pypi_build("12.6"))))
    errors = [line for line in wrong.stderr.splitlines() if "images[0].torch_build" in line]
    assert [e.split("the index says ")[1].split(" (")[0:2] for e in errors] == [
        ["CUDA 13.0", "linux/amd64)"], ["CUDA 13.0", "linux/arm64)"]], wrong.stderr


@pytest.mark.network
def test_a_lock_whose_pins_differ_from_its_torch_wheel_s_fails_the_check(tmp_path):
    def cpu_only(data):
        data["images"] = [image_named(data, "cpu")]

    path = tmp_path / facts_matrix(tmp_path, cpu_only)
    (tmp_path / "locks").mkdir()
    lock = json.loads((FIXTURE / "locks" / "cpu.json").read_text())
    packages = lock["platforms"]["linux/arm64"]["packages"]
    cudnn = next(p for p in packages if p["name"] == "nvidia-cudnn-cu13")
    cudnn["version"] = "9.20.0.48"
    (tmp_path / "locks" / "cpu.json").write_text(json.dumps(lock, indent=1) + "\n")
    result = imagegen("facts", "check", *on(path))
    assert result.returncode == 1
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    line = next(n for n, text in enumerate((tmp_path / "locks" / "cpu.json").read_text().splitlines(), 1)
                if '"9.20.0.48"' in text) - 1
    assert error.startswith(f"error: {tmp_path}/locks/cpu.json:{line}: platforms.linux/arm64.packages.nvidia-cudnn-cu13: "
                            "the index says 9.24.0.43 (torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl pins ")
    assert error.endswith("the lock says 9.20.0.48: re-lock the image [facts]")
    shutil.rmtree(tmp_path / "locks")


@pytest.mark.network
def test_a_torch_release_whose_headers_need_another_cxx_standard_fails_the_check(tmp_path):
    """torch 2.14.1's ATen/ATen.h needs C++20, read from the wheel with range requests: a matrix saying 17 is wrong."""
    def typed_17(data):
        release = {**yaml.safe_load(MATRIX_PATH.read_text())["torch"]["2.14.1"], "cxx_standard": 17}
        data["torch"] = {"2.14.1": {**release, "builds": {"13.0": {}}}}
        data["images"] = []

    result = imagegen("facts", "check", *on(facts_matrix(tmp_path, typed_17)))
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "cxx_standard" in line]
    assert len(errors) == 1 and "torch.2.14.1.cxx_standard: the index says 20 (torch-2.14.1-" in errors[0], errors
    assert "/ATen.h), the matrix says 17 [facts]" in errors[0]


# The asset names of flash-attn 2.8.3's GitHub release (its CUDA 12 wheels cover torch 2.4-2.9, its CUDA 13 ones
# 2.9 and 2.10), one per torch x CUDA here, as api.github.com/repos/.../releases/tags/v2.8.3 lists them.
FLASH_ATTN_283_ASSETS = [f"flash_attn-2.8.3+cu{cu}torch{torch}cxx11abi{abi}-cp312-cp312-linux_x86_64.whl"
                         for cu, torches in (("12", ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9"]), ("13", ["2.9", "2.10"]))
                         for torch in torches for abi in ("TRUE", "FALSE")]


@pytest.fixture
def release_server(monkeypatch):
    """A server answering GET /repos/Dao-AILab/flash-attention/releases/tags/v2.8.3 with the JSON shape GitHub's
    REST API gives (`assets: [{name: ...}]`); api.github.com does not answer here."""
    import http.server
    import threading

    from imagegen.facts import check as facts

    class Release(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"tag_name": "v2.8.3", "assets": [{"name": n} for n in FLASH_ATTN_283_ASSETS]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Release)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(facts, "GITHUB_RELEASE", f"http://127.0.0.1:{server.server_port}/releases/tags/v{{version}}")
    yield
    server.shutdown()


@pytest.mark.slow
def test_flash_attn_wheels_per_cuda_major_are_compared_with_the_release_s_assets(tmp_path, release_server):
    real = yaml.safe_load(MATRIX_PATH.read_text())["flash_attn"]["2.8.3"]

    def only(release):
        return lambda data: data.update(flash_attn={"2.8.3": release}, images=[])

    right = imagegen("facts", "check", *on(facts_matrix(tmp_path, only({**real, "python": ["3.12"]}))))
    assert right.returncode == 0 and "0 disagree, 0 not checked" in right.stdout, right.stdout + right.stderr
    typed_wrong = {**real, "python": ["3.12"], "torch_by_cuda": {**real["torch_by_cuda"], "13": ["2.9"]}}
    wrong = imagegen("facts", "check", *on(facts_matrix(tmp_path, only(typed_wrong))))
    assert wrong.returncode == 1
    (error,) = [line for line in wrong.stderr.splitlines() if line.startswith("error:")]
    assert "flash_attn.2.8.3.torch_by_cuda.13: the index says [2.9, 2.10]" in error
    assert "assets named +cu13), the matrix says [2.9] [facts]" in error


@pytest.mark.network
def test_a_build_s_archs_are_what_its_wheel_was_compiled_for(tmp_path):
    """torch 2.14.1's PyPI build (CUDA 13.0) is compiled for sm_75 to sm_120 on x86_64, read from libtorch_python.so
    by one range request: a matrix that says it runs on Volta (7.0) is wrong, naming the fact."""
    def typed_volta(data):
        release = yaml.safe_load(MATRIX_PATH.read_text())["torch"]["2.14.1"]
        build = {**release["builds"]["13.0"], "platforms": ["linux/amd64"]}
        build["archs"] = {"linux/amd64": ["7.0", *build["archs"]["linux/amd64"]]}
        data["torch"] = {"2.14.1": {**release, "builds": {"13.0": build}}}
        data["images"] = []

    result = imagegen("facts", "check", *on(facts_matrix(tmp_path, typed_volta)))
    assert result.returncode == 1, result.stdout + result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "torch.2.14.1.builds.13.0.archs.linux/amd64: the index says [7.5, 8.0, 8.6, 9.0, 10.0, 12.0]" in error
    assert "libtorch_python.so: sm_75 sm_80 sm_86 sm_90 sm_100 sm_120), the matrix says [7.0, 7.5," in error


@pytest.mark.network
def test_a_cuda_line_s_version_is_a_release_and_a_newer_update_is_a_warning(tmp_path):
    """PyPI's cuda-toolkit has a version per toolkit release: 13.2.1 is one and 13.2.2 (torch 2.15.0's) is newer, a
    warning naming what changes; 13.2.9 is none, a disagreement."""
    def line(version):
        def edit(data):
            cuda = {**yaml.safe_load(MATRIX_PATH.read_text())["cuda"]["13.2"], "version": version}
            data["cuda"] = {"13.2": cuda}
            data["images"] = []
        return edit

    older = imagegen("facts", "check", *on(facts_matrix(tmp_path, line("13.2.1"))))
    assert older.returncode == 0, older.stdout + older.stderr
    (warning,) = [text for text in older.stderr.splitlines() if text.startswith("warning:")]
    assert "cuda.13.2.version: CUDA 13.2.2 is out (cuda-toolkit 13.2.2 on PyPI: " in warning
    assert "parts change, nvidia-cuda-nvcc 13.2.78 to 13.2.86, nvidia-cuda-runtime 13.2.75 to 13.2.86 and " in warning
    assert warning.endswith("[newer-release]") and "the matrix builds on 13.2.1" in warning
    made_up = imagegen("facts", "check", *on(facts_matrix(tmp_path, line("13.2.9"))))
    assert made_up.returncode == 1
    (error,) = [text for text in made_up.stderr.splitlines() if text.startswith("error:")]
    assert "cuda.13.2.version: the index says not 13.2.9 (cuda-toolkit 13.2.* on https://pypi.org/simple: 13.2.0, " \
           "13.2.1, 13.2.2" in error
