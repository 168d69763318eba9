"""A real vLLM in an image built here: debian12-torch2.13-vllm0.31 is the vLLM line (vLLM 0.31.0 with the torch 2.13.0
and transformers 5.17.0 it pins, TRL 1.16.0) built as the cpu image is, from PyPI's wheels on the local Debian base,
because nvidia/cuda cannot be pulled here. `imagegen build --test` runs the in-image vLLM checks against it (vLLM
imports at the image's version, on the torch its wheel pins; nvcc from the nvidia-cuda-nvcc wheel compiles a kernel
with the image's g++), and the trainer's vLLM paths run against the real package: `use_vllm` without a GPU is one
line before any weights load, and `vllm-serve` is TRL's server. What needs a GPU (generation) is not run here."""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.conftest import imagegen
from tests.docker_env import build_cache_made_inside, docker_cli, prune_cache_mount


pytestmark = [pytest.mark.docker, pytest.mark.slow]
IMAGE = "debian12-torch2.13-vllm0.31"
NO_GPU = ("error: command line: key 'use_vllm': vLLM generates on CUDA GPUs and none is visible here; run on a GPU "
          "host (docker run --gpus all), or set use_vllm: false")


@pytest.fixture(scope="module")
def vllm_image(local_base_image, docker_client, tmp_path_factory) -> Iterator[dict]:
    """The image built and tested as a user would: `imagegen build --test`; its report entry and the command's output.
    Afterwards its images, the build cache they leave and uv's cache of its wheels (together about 18 GB) are
    removed: CI runs on one engine, whose disk would otherwise keep them from run to run."""
    work = tmp_path_factory.mktemp("vllm-build")
    with build_cache_made_inside(docker_client):
        result = imagegen("build", "--image", IMAGE, "--platform", "linux/amd64", "--base-image", local_base_image,
                          "--test", "--context-dir", str(work / "contexts"), "--report", str(work / "build.json"))
        report = json.loads((work / "build.json").read_text()) if (work / "build.json").exists() else {}
        (entry,) = report.get("images") or [{}]
        try:
            yield {"result": result, "entry": entry, "ref": entry.get("ref")}
        finally:
            for layer in reversed(entry.get("layers") or []):  # trainer, framework, base: each its own image
                if layer.get("image_id"):
                    docker_cli("rmi", "--force", layer["image_id"], check=False)
            prune_cache_mount(docker_client, "/root/.cache/uv")


def checks_of(output: str) -> dict[str, str]:
    """`imagegen test`'s result lines ("  pass  NAME: detail"), by check name."""
    found = {}
    for line in output.splitlines():
        words = line.split(None, 2)
        if len(words) == 3 and words[0] in ("pass", "fail", "skip"):
            found[words[1].rstrip(":")] = f"{words[0]} {words[2]}"
    return found


def test_the_vllm_line_builds_and_passes_its_in_image_checks(vllm_image):
    result = vllm_image["result"]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    checks = checks_of(result.stdout + result.stderr)
    # cuda.kernel: the wheel's toolkit, laid out in /usr/local/cuda, links a kernel to libcudart (torch's cpp_extension
    # links CUDA extensions with -lcudart), which CUDA_HOME at the wheel's own folder could not: no libcudart.so
    for name in ("vllm.import", "vllm.torch", "vllm.nvcc", "version.vllm", "cuda.kernel"):
        found = next((v for k, v in checks.items() if k.endswith(name)), "")
        assert found.startswith("pass"), (name, found, sorted(checks))
    # issue 52: FlashAttention 4 beside vLLM, its kernels compiled at build and found by FA4 in the image
    for name in ("flash_attn_4.import", "flash_attn_4.cutlass", "flash_attn_4.transformers", "flash_attn_4.cache"):
        found = next((v for k, v in checks.items() if k.endswith(name)), "")
        assert found.startswith("pass"), (name, found, sorted(checks))
    assert "vllm 0.31.0 imports, expected 0.31.0" in result.stdout + result.stderr
    assert "compiles a kernel" in result.stdout + result.stderr
    assert "-vllm0.31.0-debian12-" in vllm_image["ref"]  # the tag says it carries vLLM


def test_use_vllm_with_a_real_vllm_and_no_gpu_is_one_line_before_anything_loads(vllm_image):
    """Checked first: the model and data named do not even exist, and the vLLM line is still the only one."""
    done = docker_cli("run", "--rm", vllm_image["ref"], "train", "--model", "/nowhere", "--data", "/nowhere.jsonl",
                  "--output", "/tmp/run", "--use-vllm", "--dry-run", check=False)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip() == NO_GPU, done.stderr[-3000:]


def test_vllm_serve_is_trls_server_on_the_real_vllm(vllm_image):
    done = docker_cli("run", "--rm", vllm_image["ref"], "vllm-serve", "--help", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--tensor_parallel_size" in done.stdout and "--gpu_memory_utilization" in done.stdout, done.stdout[-3000:]
