"""Locks: resolved from the real index (PyPI here), checked offline by validate, installed step by step;
and the facts check against the real index."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from imagegen.locking import resolve as lock_module
from imagegen.locking import lockfile
from tests.helpers import FIXTURE, fixture_data, image_named, locked_matrix, locked_named, write_matrix
from tests.test_cli import imagegen, on

# What uv prints for `accelerate` and `torch==2.14.1`, trimmed to three packages.
UV_OUTPUT = """\
accelerate==1.15.0 \\
    --hash=sha256:5654f8c5eaa0d4fa68b33e287a97765da6849bf6d51dcac874e73fbbddfb6134 \\
    --hash=sha256:97eacca0b73e45cb867dbf8c5d5d4dc32219544300e0c8992c7334dc2ef33cec
    # from https://pypi.org/simple
filelock==4.3.1 \\
    --hash=sha256:aaaa
    # via torch
    # from https://pypi.org/simple
torch==2.14.1 \\
    --hash=sha256:305a61f61f35f128579f299c5bd33d475f6a01c6307336139632e30856c4854d
    # via
    #   accelerate
    #   -r -
    # from https://pypi.org/simple
"""


def test_uv_output_becomes_locked_packages_with_hashes_index_and_parents():
    accelerate, filelock, torch = lock_module.parse_compiled(UV_OUTPUT)
    assert (accelerate.name, accelerate.version, accelerate.required_by) == ("accelerate", "1.15.0", ())
    assert len(accelerate.hashes) == 2 and accelerate.index == "https://pypi.org/simple"
    assert filelock.required_by == ("torch",) and torch.required_by == ("accelerate",)
    assert torch.requirement_line() == ("torch==2.14.1 --hash=sha256:305a61f61f35f128579f299c5bd33d475f6a01c63073361"
                                        "39632e30856c4854d")


def test_a_lock_round_trips_and_says_how_it_is_refreshed():
    lock = locked_named("cu124-torch2.6").lock
    text = lockfile.dumps([lock])
    assert json.loads(text)["comment"].endswith(f"then run `imagegen lock --matrix {FIXTURE}/matrix.yaml --image "
                                                "cu124-torch2.6`.")
    assert lockfile.loads(text, lock.command) == {"linux/amd64": lock}
    with pytest.raises(lockfile.LockFormatError):
        lockfile.loads('{"lock_version": 1, "image": "x"}', "")


def test_install_steps_put_torch_first_and_install_each_package_once():
    image = locked_named("cu130-torch2.11")
    lock, families = image.lock, tuple(image.plan.components.families.values())
    steps = lockfile.install_steps(lock, deepspeed=True, flash_attn_source_build=True, torch_families=families)
    assert [step.name for step in steps] == ["installer", "cuda-libraries", "cudnn-nccl", "torch", "build-tools",
                                             "flash-attn", "deepspeed", "stack"]
    lines = [line for step in steps for line in (*step.wheels, *step.sources) if not line.startswith("flash-attn")]
    assert sorted(line.split("==")[0] for line in lines) == sorted(p.name for p in lock.packages)
    assert [line.split("==")[0] for line in steps[0].wheels] == ["uv"] and steps[0].tool == "pip"
    assert all(step.tool == "uv" for step in steps[1:])
    cuda_libraries = {line.split("==")[0] for line in (*steps[1].wheels, *steps[2].wheels)}
    assert cuda_libraries == {p.name for p in lock.packages if p.name.startswith("nvidia-")}
    # cuDNN and NCCL (the families of the components torch decides) apart from the CUDA release's libraries
    assert {line.split("==")[0] for line in steps[2].wheels} == {
        p.name for p in lock.packages if p.name.startswith(families)} and len(families) == 2
    assert any(line.startswith("torch==2.11.0 ") for line in steps[3].wheels)
    assert [line.split("==")[0] for line in steps[6].sources] == ["deepspeed"]
    assert steps[5].sources == ("flash-attn==2.8.3 --hash=sha256:" + lock.flash_attn.sha256,)


def test_another_torch_on_the_same_cuda_libraries_installs_the_same_cuda_library_step():
    """The step's requirement file is all its cache key adds to its parent's: equal files, one shared layer."""
    lock = locked_named("cpu").lock

    def other_torch(package):
        if package.name in ("torch", "torchvision", "triton"):
            return lockfile.LockedPackage(package.name, package.version + ".post1", ("sha256:" + "1" * 64,),
                                          package.index, package.required_by)
        return package

    other = lockfile.Lock(lock.image, lock.platform, lock.inputs, lock.base, tuple(map(other_torch, lock.packages)))
    ours, theirs = (lockfile.install_steps(each, deepspeed=False, flash_attn_source_build=False)
                    for each in (lock, other))
    assert ours[1].name == theirs[1].name == "cuda-libraries" and len(ours[1].wheels) > 5
    assert ours[1].files() == theirs[1].files()
    assert ours[2].files() != theirs[2].files()  # torch's own step differs


def test_packages_from_the_torch_index_install_from_that_index_alone():
    lock = locked_named("cpu").lock
    index = "https://download.pytorch.org/whl/cu130"
    moved = lockfile.Lock(lock.image, lock.platform, {**lock.inputs, "torch_index": index}, lock.base,
                          tuple(p if p.name not in ("torch", "triton") else lockfile.LockedPackage(
                              p.name, p.version, p.hashes, index, p.required_by) for p in lock.packages))
    steps = lockfile.install_steps(moved, deepspeed=False, flash_attn_source_build=False)
    assert steps[2].name == "torch-torch-index" and steps[2].index_url == index
    assert sorted(line.split("==")[0] for line in steps[2].wheels) == ["torch", "triton"]
    assert all(step.index_url is None for step in steps[3:])


def test_a_changed_input_makes_the_lock_stale_with_what_changed(tmp_path):
    def bump_peft(data):
        data["defaults"]["peft"] = "0.21.1"
        data["packages"]["peft"]["0.21.1"] = {"python": ">=3.10", "torch": ">=1.13"}

    result = imagegen("validate", *on(locked_matrix(tmp_path, bump_peft)))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    stale = [line for line in result.stderr.splitlines() if "[lock-stale]" in line]
    assert len(stale) == len(yaml.safe_load((tmp_path / "matrix.yaml").read_text())["images"])
    assert "is stale (requirements: +peft==0.21.1, -peft==0.21.2); run `imagegen lock --matrix" in stale[0]


def test_a_lock_that_disagrees_with_the_typed_facts_fails_validate(tmp_path):
    path = locked_matrix(tmp_path, lambda d: d["torch"]["2.14.1"].update(cudnn="9.99.0.1"))
    result = imagegen("validate", *on(path))
    assert result.returncode == 2
    assert "torch.2.14.1.builds.13.0.cudnn: torch 2.14.1's CUDA 13.0 build pins nvidia-cudnn-cu* 9.24.0.43 in cpu's " \
           "lock (read from the index), the matrix says 9.99.0.1: correct the matrix [lock-facts]" in result.stderr


def test_a_missing_lock_keeps_render_and_build_from_starting(tmp_path):
    path = locked_matrix(tmp_path)
    (tmp_path / "locks" / "cpu.json").unlink()
    result = imagegen("render", *on(path), "--image", "cpu", "--out", str(tmp_path / "out"))
    assert result.returncode == 1 and not (tmp_path / "out").exists()
    fix = f"no lock at {tmp_path}/locks/cpu.json; run `imagegen lock --matrix {path} --image cpu`"
    assert result.stderr == f"error: cpu: {fix}\nerror: cpu-arm64: {fix}\n"  # each platform of the image


@pytest.mark.network
def test_lock_writes_hashed_locks_that_validate_accepts(tmp_path):
    """`imagegen lock` against the real index: every package pinned with its hashes, torch's cuDNN and
    NCCL among them, and the lock current for validate."""
    path = locked_matrix(tmp_path)
    shutil.rmtree(tmp_path / "locks")
    result = imagegen("lock", *on(path), "--image", "cpu", "--image", "cu124-torch2.6")
    assert result.returncode == 0, result.stderr
    cpu = json.loads((tmp_path / "locks" / "cpu.json").read_text())["platforms"]["linux/amd64"]
    packages = {p["name"]: p for p in cpu["packages"]}
    assert packages["torch"]["version"] == "2.14.1" and "nvidia-cudnn-cu13" in packages
    assert all(p["hashes"] and all(h.startswith("sha256:") for h in p["hashes"]) for p in cpu["packages"])
    assert cpu["inputs"]["platform"] == "x86_64-manylinux_2_36"
    cu124 = json.loads((tmp_path / "locks" / "cu124-torch2.6.json").read_text())["platforms"]["linux/amd64"]
    assert {p["name"]: p["version"] for p in cu124["packages"]}["nvidia-cudnn-cu12"] == "9.1.0.70"
    assert cu124["flash_attn"]["requirement"].startswith("flash-attn @ https://github.com/Dao-AILab/")
    assert f"{tmp_path}/locks/cpu.json: linux/amd64: " in result.stdout and "nvidia-nccl-cu13 2.30.7" in result.stdout
    # The other locked images were not made again: validate sees those two as current.
    for name in [i["name"] for i in yaml.safe_load(path.read_text())["images"]]:
        if name not in ("cpu", "cu124-torch2.6"):
            shutil.copy(FIXTURE / "locks" / f"{name}.json", tmp_path / "locks")
    assert imagegen("validate", *on(path)).returncode == 0


@pytest.mark.network
def test_an_unresolvable_stack_fails_with_the_resolvers_reason_and_the_matrix_line(tmp_path):
    """The matrix's facts claim trl 1.16.0 runs on Python 3.10; the index says otherwise."""
    def wrong_floor(data):
        data["packages"]["trl"]["1.16.0"]["python"] = ">=3.10"
        data["packages"]["transformers"]["5.20.2"] = {"python": ">=3.10", "torch": ">=2.6"}
        image_named(data, "cu124-torch2.6").update(python="3.10", transformers="5.20.2")

    path = locked_matrix(tmp_path, wrong_floor)
    result = imagegen("lock", *on(path), "--image", "cu124-torch2.6")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "name: cu124-torch2.6" in text)
    (error,) = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert error.startswith(f"error: cu124-torch2.6 ({path}:{line}): no resolution: ")
    assert "trl==1.16.0 depends on Python>=3.11" in error


def test_an_index_that_does_not_answer_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("UV_NO_CACHE", "1")
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")  # a refused connection is final: no need to wait out uv's retries
    path = locked_matrix(tmp_path)
    result = imagegen("lock", *on(path), "--image", "cpu")
    assert result.returncode == 1
    (error,) = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert error.startswith("error: cpu (") and "cannot reach http://127.0.0.1:9/simple" in error


def facts_matrix(tmp_path, edit) -> str:
    """The tests' matrix cut down to one torch release and one package, so that a check is quick."""
    data = fixture_data()
    data["torch"] = {"2.14.1": {**data["torch"]["2.14.1"], "builds": {"13.0": {}}}}
    data["packages"] = {"trl": data["packages"]["trl"]}
    data["flash_attn"] = {}
    data["images"] = [image_named(data, "cpu")]
    edit(data)
    return str(write_matrix(tmp_path, data))


@pytest.mark.network
def test_facts_check_is_clean_on_the_real_facts_pypi_serves(tmp_path):
    result = imagegen("facts", "check", "--matrix", facts_matrix(tmp_path, lambda d: None))
    assert result.returncode == 0, result.stderr
    # The base tag's registry (Docker Hub) is all that may be out of reach: where it answers, nothing is unchecked.
    not_checked = [line for line in result.stderr.splitlines() if line.startswith("not checked:")]
    assert all("debian:bookworm-slim" in line for line in not_checked), not_checked
    assert f"0 disagree, {len(not_checked)} not checked" in result.stdout


@pytest.mark.network
def test_facts_check_catches_a_wrong_cudnn_pin_and_a_wrong_python_floor(tmp_path):
    def wrong(data):
        data["torch"]["2.14.1"]["cudnn"] = "9.20.0.48"
        data["packages"]["trl"]["1.16.0"]["python"] = ">=3.10"

    path = facts_matrix(tmp_path, wrong)
    result = imagegen("facts", "check", "--matrix", path)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, result.stderr
    assert "torch.2.14.1.builds.13.0.cudnn: the index says 9.24.0.43 (" in errors[0]
    assert "pins nvidia-cudnn-cu*), the matrix says 9.20.0.48 [facts]" in errors[0]
    assert "packages.trl.1.16.0.python: the index says [3.11, " in errors[1]
    assert "(trl 1.16.0 declares Requires-Python >=3.11), the matrix says [3.10, 3.11, " in errors[1]


@pytest.mark.network
def test_facts_check_catches_arm64_wheels_that_are_cpu_only(tmp_path):
    """PyPI's aarch64 torch is a CPU build through 2.10 (2.9.1 here, 2.10.0 in test_facts.py): a CUDA image
    cannot be built for arm64 from it."""
    def cpu_only_arm64(data):
        data["torch"] = {"2.9.1": {**fixture_data()["torch"]["2.9.1"],
                                   "builds": {"12.8": {"platforms": ["linux/amd64", "linux/arm64"]}}}}

    result = imagegen("facts", "check", "--matrix", facts_matrix(tmp_path, cpu_only_arm64))
    assert result.returncode == 1
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "torch.2.9.1.builds.12.8.platforms: the index says CPU-only aarch64 wheels (" in error
    assert "pins no nvidia-cudnn-cu*), the matrix says linux/arm64 CUDA wheels [facts]" in error


def test_an_unpinned_base_s_lock_says_so_without_the_locking_machine_s_error():
    """The lock is committed and read on other machines: their DNS errors are the lock command's warning, not data."""
    from imagegen.locking import resolve

    base, warning = resolve.pin_base("127.0.0.1:9/nvidia/cuda:13.0.3-devel-ubuntu24.04")  # port 9: nothing listens
    assert (base.digest, base.note) == (None, resolve.UNPINNED_NOTE)
    assert "127.0.0.1:9" not in base.note and "127.0.0.1:9" in warning and warning.startswith("base 127.0.0.1:9/")


def _hand_edit_cpu_lock(directory, change) -> None:
    path = directory / "locks" / "cpu.json"
    data = json.loads(path.read_text())
    change(data["platforms"]["linux/amd64"]["packages"])
    path.write_text(json.dumps(data, indent=1))


def _entry(packages, name):
    return next(p for p in packages if p["name"] == name)


@pytest.mark.parametrize("change, says", [
    (lambda packages: _entry(packages, "peft").update(hashes=[]), "].hashes: peft: hashes must be one or more"),
    (lambda packages: _entry(packages, "peft").update(hashes=["sha256:abc"]), "].hashes: peft: hashes must be one or"),
    (lambda packages: _entry(packages, "peft").update(name="Peft!"), "].name: 'Peft!' is not a canonical"),
    (lambda packages: _entry(packages, "peft").update(version="latest"), "].version: peft: 'latest' is not a version"),
    (lambda packages: packages.remove(_entry(packages, "uv")), "]: the requirement 'uv' has no package in the lock"),
    (lambda packages: packages.remove(_entry(packages, "peft")), "required_by 'peft', which the lock does not hold"),
    (lambda packages: packages.remove(_entry(packages, "torch")), "required_by 'torch', which the lock does not hold"),
])
def test_a_hand_edited_lock_entry_is_refused_naming_it(tmp_path, change, says):
    matrix = locked_matrix(tmp_path)
    _hand_edit_cpu_lock(tmp_path, change)
    for command, code in (("validate", 2), ("render", 1)):  # render: the image it could not render failed
        result = imagegen(command, *on(matrix), *(["--image", "cpu", "--out", str(tmp_path / "out")]
                                                   if command == "render" else []))
        assert result.returncode == code and "Traceback" not in result.stderr, result.stderr
        lines = [line for line in result.stderr.splitlines() if "locks/cpu.json:" in line]  # render: per platform
        assert lines and all(says in line and line.endswith("[lock-format]") for line in lines), lines
    assert not (tmp_path / "out").exists()


def test_a_trainer_extras_packages_get_a_step_of_their_own_below_the_stacks():
    """A one-package change to the stack then sends the stack's layer again, not the extra's (JupyterLab's 0.21 GB)."""
    lock = locked_named("cpu").lock
    plain = lockfile.install_steps(lock, deepspeed=False, flash_attn_source_build=False)
    steps = lockfile.install_steps(lock, deepspeed=False, flash_attn_source_build=False,
                                   extra_roots=("click", "pyyaml"))
    assert [step.name for step in steps] == [step.name for step in plain][:-1] + ["extras", "stack"]
    extras = {line.split("==")[0] for line in steps[-2].wheels}
    assert {"click", "pyyaml"} <= extras
    stack = {line.split("==")[0] for line in steps[-1].wheels}
    assert not extras & stack and extras | stack == {line.split("==")[0] for line in plain[-1].wheels}


@pytest.mark.network
def test_facts_check_finds_a_lock_entry_whose_requirements_were_edited_with_it(tmp_path):
    """A dependency dropped together with its parent's requirement of it passes the offline walk (the lock is
    consistent with itself); the index's metadata, read again, says otherwise, at the entry's line."""
    path = facts_matrix(tmp_path, lambda d: None)
    data = json.loads((FIXTURE / "locks" / "cpu.json").read_text())
    section = data["platforms"]["linux/amd64"]
    section["packages"] = [p for p in section["packages"] if p["name"] != "absl-py"]
    board = next(p for p in section["packages"] if p["name"] == "tensorboard")
    board["requires"] = [line for line in board["requires"] if not line.startswith("absl-py")]
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "cpu.json").write_text(json.dumps(data, indent=1))
    result = imagegen("facts", "check", "--matrix", path)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and len(errors) == 1, result.stderr
    assert "locks/cpu.json:" in errors[0] and "platforms.linux/amd64.packages.tensorboard: the index says " \
        f"tensorboard {board['version']} requires ['absl-py" in errors[0] and "re-lock the image [facts]" in errors[0]
