"""GPU images built and checked here: CUDA from NVIDIA's wheels on the local Debian base, where nvidia/cuda cannot be
pulled (imagegen/matrix/cuda_wheels.py). `imagegen build --test` builds each line as a user would and runs every
in-image check that needs no GPU, the tiny GRPO run among them; the GPU checks skip, saying so.

- debian12-cu130-torch2.14, the CUDA 13 devel line: nvcc, headers and CCCL from cuda-toolkit's wheels laid out in
  /usr/local/cuda; a kernel compiled, linked to libcudart and loaded; DeepSpeed's FusedAdam built by its JIT with that
  nvcc; torch's compiled architectures cover the image's.
- debian12-cu124-torch2.6, the CUDA 12 runtime line (CUDA 12's nvcc wheels ship no nvcc): torch's CUDA 12.4 wheels
  only, no toolkit; what `imagegen build --cuda 12.4` builds where Docker Hub does not answer. debian12-cu128-torch2.8,
  the other CUDA 12 runtime line, is the same template with other pins, and is not built here.

Each image's layers, its build cache and uv's cache mount are removed afterwards, as the vLLM test does."""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from tests.conftest import ensure_wheelhouse, imagegen
from tests.docker_env import BASE_IMAGE, build_cache_made_inside, docker_cli, prune_cache_mount
from tests.test_image_vllm import checks_of


pytestmark = [pytest.mark.docker, pytest.mark.slow]
DEVEL, RUNTIME = "debian12-cu130-torch2.14", "debian12-cu124-torch2.6"


@pytest.fixture(scope="module", params=[DEVEL, RUNTIME])
def wheels_image(request, local_base_image, docker_client, tmp_path_factory) -> Iterator[dict]:
    """One line built and tested by `imagegen build --test`: its report entry, the command's output and what
    `docker inspect` says of it; removed afterwards."""
    name = request.param
    work = tmp_path_factory.mktemp(name)
    # The wheelhouse holds torch 2.14.1's wheels (the cpu image's): sent to the build only where they are installed,
    # since sending its 3 GB as build context takes about 36 s here.
    wheelhouse = ["--wheelhouse", str(ensure_wheelhouse())] if name == DEVEL else []
    with build_cache_made_inside(docker_client):
        result = imagegen("build", "--image", name, "--platform", "linux/amd64", "--base-image", local_base_image,
                          *wheelhouse, "--test",
                          "--context-dir", str(work / "contexts"), "--report", str(work / "build.json"))
        report = json.loads((work / "build.json").read_text()) if (work / "build.json").exists() else {}
        (entry,) = report.get("images") or [{}]
        inspected = {}
        if entry.get("ref"):
            inspected = json.loads(docker_cli("image", "inspect", entry["ref"]).stdout)[0]["Config"]
        try:
            yield {"name": name, "result": result, "entry": entry, "ref": entry.get("ref") or "",
                   "checks": checks_of(result.stdout + result.stderr), "config": inspected}
        finally:
            for layer in reversed(entry.get("layers") or []):  # trainer, framework, base: each its own image
                if layer.get("image_id"):
                    docker_cli("rmi", "--force", layer["image_id"], check=False)
            prune_cache_mount(docker_client, "/root/.cache/uv")


def check(image: dict, name: str) -> str:
    return next((value for key, value in image["checks"].items() if key.endswith(name)), "")


def test_each_line_builds_and_passes_every_check_that_needs_no_gpu(wheels_image):
    result = wheels_image["result"]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    checks = wheels_image["checks"]
    assert not [k for k, v in checks.items() if v.startswith("fail")], checks
    for name in ("cuda.archs", "version.torch", "train.tiny_grpo"):
        assert check(wheels_image, name).startswith("pass"), (name, sorted(checks.items()))
    gpu = [v for k, v in checks.items() if k.split(".", 1)[-1].startswith("gpu.")]
    # each skipped for want of a GPU, or, attached to flash-attn or DeepSpeed (NEEDS), where the image has not that
    absent = ("skip no flash_attn in this image (", "skip no flash_attn_4 in this image (",
              "skip no deepspeed in this image (")
    assert gpu and all((v.startswith("skip") and "no GPU" in v) or v.startswith(absent) for v in gpu), gpu
    assert any("no GPU" in v for v in gpu), gpu


def test_the_devel_line_holds_flash_attention_4_and_each_line_says_its_attention(wheels_image):
    """flash-attn-4 from the lock, checked inside without a GPU: it imports, its CUTLASS DSL loads its CUDA 13
    libraries, transformers takes flash_attention_4. The runtime line has none (torch 2.6.0's pre-C++11 ABI: the
    package-abi rule). Each tiny GRPO run says it chose SDPA and why."""
    assert "attention: sdpa (no GPU visible)" in check(wheels_image, "train.tiny_grpo"), wheels_image["checks"]
    names = ("flash_attn_4.import", "flash_attn_4.cutlass", "flash_attn_4.transformers")
    if wheels_image["name"] != DEVEL:
        for name in names:
            assert check(wheels_image, name).startswith("skip no flash_attn_4 in this image"), wheels_image["checks"]
        return
    for name in names:
        assert check(wheels_image, name).startswith("pass"), (name, wheels_image["checks"])
    assert "with its cu13 libraries" in check(wheels_image, "flash_attn_4.cutlass")
    assert check(wheels_image, "gpu.flash_attn_4").startswith("skip no GPU"), wheels_image["checks"]
    assert wheels_image["config"]["Labels"]["io.imagegen.flash-attn-4"] == "4.0.0b40"


def test_a_forced_flash_attention_4_without_a_gpu_is_one_line_and_exit_2(wheels_image):
    if wheels_image["name"] != DEVEL:
        pytest.skip("the runtime line has no flash-attn-4")
    script = ("set -e; vlmgrpo make-tiny --out /tmp/tiny --rows 4 | tail -1 > /tmp/paths.json; "
              "read -r model data root < <(python3 -c 'import json; p = json.load(open(\"/tmp/paths.json\")); "
              "print(p[\"model\"], p[\"data\"], p[\"image_root\"])'); "
              "exec vlmgrpo train --model \"$model\" --data \"$data\" --image-root \"$root\" --output /tmp/out "
              "--max-steps 1 --num-generations 2 --batch-size 2 --set attn_implementation=flash_attention_4")
    done = docker_cli("run", "--rm", "--entrypoint", "bash", wheels_image["ref"], "-c", script, check=False)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "flash_attention_4 cannot run here" in line]
    assert len(errors) == 1 and "no GPU visible" in errors[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_the_tag_and_labels_say_cuda_comes_from_nvidias_wheels_on_debian(wheels_image):
    labels, ref = wheels_image["config"]["Labels"], wheels_image["ref"]
    # Built on the local Debian that stands in for the lock's (--base-image): the base label says so, and names the
    # lock's base beside it; the description and the tag are the lock's.
    assert labels["org.opencontainers.image.base.name"] == BASE_IMAGE, labels
    assert labels["io.imagegen.base.locked"].startswith("debian:bookworm-slim"), labels  # with @sha256: where locked
    assert "NVIDIA's wheels on debian:" in labels["org.opencontainers.image.description"], labels
    if wheels_image["name"] == DEVEL:
        assert "-cu130-" in ref and ref.split(":")[-1].count("-debian12-") == 1, ref
        assert labels["io.imagegen.cuda.toolkit"].startswith("13.0."), labels
    else:
        assert "-cu124-" in ref and "-runtime-debian12-" in ref, ref
        assert labels["io.imagegen.cuda.toolkit"] == "none", labels


def test_the_nvidia_container_toolkit_sees_what_it_sees_in_nvidia_cuda(wheels_image):
    """The variables NVIDIA's images set, which the NVIDIA container toolkit reads to expose the GPUs and the driver."""
    env = dict(line.split("=", 1) for line in wheels_image["config"]["Env"])
    required = "cuda>=13.0 driver>=580" if wheels_image["name"] == DEVEL else "cuda>=12.4 driver>=525.60.13"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility", env
    assert env["NVIDIA_REQUIRE_CUDA"] == required, env
    assert "/usr/local/nvidia/lib64" in env["LD_LIBRARY_PATH"], env


def test_the_devel_line_compiles_kernels_and_builds_deepspeeds_ops_with_its_nvcc(wheels_image):
    if wheels_image["name"] != DEVEL:
        assert check(wheels_image, "cuda.kernel").startswith("skip no CUDA toolkit"), wheels_image["checks"]
        return
    assert check(wheels_image, "cuda.kernel").startswith("pass"), wheels_image["checks"]
    assert "linked to libcudart; it loads" in check(wheels_image, "cuda.kernel")
    assert check(wheels_image, "cuda.deepspeed_op").startswith("pass"), wheels_image["checks"]
    assert "built FusedAdam" in check(wheels_image, "cuda.deepspeed_op")
    done = docker_cli("run", "--rm", "--entrypoint", "nvcc", wheels_image["ref"], "--version", check=False)
    assert done.returncode == 0 and "release 13.0" in done.stdout, done.stdout + done.stderr
