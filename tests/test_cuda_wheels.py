"""CUDA from NVIDIA's wheels on a base of its own (imagegen/matrix/cuda_wheels.py) and the rule on source builds' C++
standard (imagegen/matrix/source_builds.py), as pure logic on the real matrix and copies of it with one thing
changed. tests/test_image_cuda_wheels.py builds the two lines on the engine."""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from imagegen.locking.inputs import resolution_requirements
from imagegen.matrix import cuda_wheels
from imagegen.workspace import Workspace

from tests.helpers import MATRIX_PATH, REPO, image_named, problems_of

DEVEL, RUNTIME = "debian12-cu130-torch2.14", "debian12-cu128-torch2.8"


@functools.lru_cache(maxsize=1)
def real():
    return Workspace(MATRIX_PATH).load()


def real_data() -> dict:
    return copy.deepcopy(yaml.safe_load(MATRIX_PATH.read_text()))


def locked(name: str):
    return next(image for image in real().locked.values() if image.name == name)


def test_an_image_naming_cuda_and_base_takes_its_cuda_from_wheels_on_that_base():
    devel, runtime = locked(DEVEL), locked(RUNTIME)
    assert (devel.plan.gpu.cuda_source, devel.plan.base.image, devel.plan.base.os) == ("wheels", "debian:bookworm-slim",
                                                                             "debian12")
    assert (devel.plan.gpu.cuda, devel.plan.base.flavor, devel.plan.has_toolkit) == ("13.0", "devel", True)
    assert (runtime.plan.gpu.cuda, runtime.plan.base.flavor, runtime.plan.has_toolkit) == ("12.8", "runtime", False)
    nvidia = locked("cu130-torch2.14")
    assert (nvidia.plan.gpu.cuda_source, nvidia.plan.base.image) == ("base", "nvidia/cuda:13.0.3-devel-ubuntu24.04")


def test_only_a_devel_image_on_wheels_locks_the_toolkits_devel_parts_at_its_cuda_line():
    wanted = [r for r in resolution_requirements(locked(DEVEL).plan) if r.startswith(cuda_wheels.TOOLKIT)]
    assert wanted == ["cuda-toolkit[nvcc,cudart,cccl,nvrtc,cublas,cusparse,cusolver,curand]==13.0.*"]
    assert not [r for r in resolution_requirements(locked(RUNTIME).plan) if r.startswith(cuda_wheels.TOOLKIT)]
    assert not [r for r in resolution_requirements(locked("cu130-torch2.14").plan) if r.startswith("cuda-toolkit")]
    # the lock took the update torch's wheels pin, and the labels say it
    assert locked(DEVEL).lock.package("cuda-toolkit").version == locked(DEVEL).labels["io.imagegen.cuda.toolkit"]
    assert locked(DEVEL).lock.package("nvidia-cuda-nvcc") is not None


def test_tags_labels_and_the_listing_say_which_base_the_cuda_comes_from():
    devel, runtime, nvidia = locked(DEVEL), locked(RUNTIME), locked("cu130-torch2.14")
    assert devel.version_tag.startswith("0.1.0-torch2.14.1-cu130-cudnn9-py3.11-debian12-"), devel.version_tag
    assert runtime.version_tag.startswith("0.1.0-torch2.8.0-cu128-cudnn9-py3.11-runtime-debian12-")
    assert "debian12" not in nvidia.version_tag
    assert "cu13.0" in nvidia.alias_tags and "cu13.0" not in devel.alias_tags  # cuX.Y stays nvidia/cuda's line
    description = devel.labels["org.opencontainers.image.description"]
    assert "the CUDA toolkit 13.0.3.0 from NVIDIA's wheels on debian:bookworm-slim" in description, description
    assert "no CUDA toolkit, the CUDA libraries of NVIDIA's wheels" in runtime.labels[
        "org.opencontainers.image.description"]
    assert runtime.labels["io.imagegen.cuda.toolkit"] == "none" and runtime.labels["io.imagegen.cuda"] == "12.8"
    assert devel.labels["io.imagegen.base.cudnn"] == "none"


def test_the_devel_line_lays_the_wheels_toolkit_out_in_usr_local_cuda_and_sets_nvidias_variables():
    base, framework, _ = (context.dockerfile for context in locked(DEVEL).contexts)
    # No cuda-compat on wheels: minor-version compatibility, any GPU, from CUDA 13's minimum (tests/test_drivers.py)
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0 driver>=580"' in base
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in base
    assert "g++" in base and "python3-dev" in base  # nvcc's host compiler, Python's headers for extensions
    assert "ln -s /opt/venv/lib/python3.11/site-packages/nvidia/cu13/bin/* /usr/local/cuda/bin/" in framework
    assert "ln -s libcudart.so.13 /usr/local/cuda/lib64/libcudart.so" in framework
    assert "ENV CUDA_HOME=/usr/local/cuda" in framework
    runtime_base, runtime_framework, _ = (context.dockerfile for context in locked(RUNTIME).contexts)
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.8 driver>=525.60.13"' in runtime_base and "g++" not in runtime_base
    assert "CUDA_HOME" not in runtime_framework


def test_a_cuda_12_devel_image_on_wheels_is_refused_for_its_missing_nvcc():
    data = real_data()
    image_named(data, RUNTIME).pop("flavor")  # devel, the default
    problems = [p for p in problems_of(data) if p.rule == "cuda-wheels-nvcc"]
    assert len(problems) == 1 and problems[0].key.endswith(".cuda"), problems
    assert "ship ptxas and libnvvm only" in problems[0].message and "flavor: runtime" in problems[0].message


def test_an_image_with_a_base_of_its_own_still_says_its_os():
    data = real_data()
    image_named(data, DEVEL).pop("os")
    assert "known-os" in {p.rule for p in problems_of(data)}


def test_a_flash_attn_source_build_older_than_torchs_headers_is_refused_with_the_rule():
    """The planted torch 2.15 + flash-attn 2.8.3 source build that docker build would stop at, after the wait."""
    data = real_data()
    image_named(data, "cu132-torch2.15").update(flash_attn={"version": "2.8.3", "build": "source"})
    problems = [p for p in problems_of(data) if p.rule == "flash-attn-cxx-standard"]
    assert len(problems) == 1, problems_of(data)
    assert problems[0].message.startswith("flash-attn 2.8.3 builds with -std=c++17; torch 2.15.0's headers need "
                                          "C++20"), problems[0].message
    # the same build against torch 2.11's headers (C++17) compiles: no such problem
    data = real_data()
    assert not [p for p in problems_of(data) if p.rule == "flash-attn-cxx-standard"]
    assert image_named(data, "cu130-torch2.11")["flash_attn"] == {"version": "2.8.3", "build": "source"}


def test_a_source_build_starts_with_the_compile_probe_at_its_releases_standard():
    framework = locked("cu130-torch2.11").contexts[1]
    text = framework.dockerfile
    probe = text.index("bash /tmp/compile-probe.sh flash-attn 2.8.3 17")
    assert probe < text.index("FLASH_ATTENTION_FORCE_BUILD=TRUE"), text
    assert framework.files["compile-probe.sh"] == (REPO / "templates" / "compile-probe.sh").read_bytes()
    assert "compile-probe.sh" not in locked(DEVEL).contexts[1].files  # nothing compiled from source there


@pytest.mark.slow  # torch's extension headers parsed twice by g++: about 30 s
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine to compile torch's headers with")
def test_the_compile_probe_stops_a_build_whose_standard_is_older_than_torchs_headers_in_seconds():
    """Run on this venv's torch 2.14.1 (C++20 headers), as the framework layer runs it before flash-attn's build."""
    import torch

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    probe = [str(REPO / "templates" / "compile-probe.sh"), "flash-attn", "2.8.3"]
    started = time.monotonic()
    refused = subprocess.run(["bash", *probe, "17"], capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - started
    version = torch.__version__.split("+")[0]
    assert refused.returncode == 1 and took < 120, (refused, took)
    assert refused.stderr.strip() == f"flash-attn 2.8.3 builds with -std=c++17; torch {version}'s headers need C++20"
    accepted = subprocess.run(["bash", *probe, "20"], capture_output=True, text=True, env=env, timeout=300)
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert f"torch {version}'s headers compile with -std=c++20" in accepted.stdout


def test_validate_on_this_repository_says_each_kind_of_warning_once():
    done = subprocess.run([sys.executable, "-m", "imagegen", "validate"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    kinds = [line.rsplit("[", 1)[-1] if line.rstrip().endswith("]") or "] (and " in line else line[:40]
             for line in warnings]
    assert warnings and len(set(kinds)) == len(kinds), warnings  # one line per kind, however many images
    assert any("images have no base digest: " in line and "cpu" in line for line in warnings), warnings
