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


# One key of a tiny model's attention, for sm90: compiled in one process, then served by the cache in a fresh one.
ONE_KEY = {"families": {"tiny": {"text": {"hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1}}},
           "gpus": {"H100 SXM, H200": {"sm": 90, "target": "sm_90a", "sms": 132}},
           "shapes": {"batches": [1], "sequences": [256], "varlen_tokens": [], "varlen_sequences": [],
                      "window_counts": []}}
BUILD = "/opt/venv/lib/python3.11/site-packages/vlmgrpo/fa4kernels/build.py"


def test_the_devel_line_ships_flash_attention_4_s_kernels_compiled(wheels_image):
    """Issue 52: FA4's kernels compiled at build for each GPU of targets.json, in FA4's own cache, its fingerprint the
    one FA4 computes from the installed files (flash_attn_4.cache); the build log says how many and how long."""
    if wheels_image["name"] != DEVEL:
        assert check(wheels_image, "flash_attn_4.cache").startswith("skip no flash_attn_4 in this image")
        return
    cache = check(wheels_image, "flash_attn_4.cache")
    assert cache.startswith("pass") and "H100 SXM, H200 (sm90, 132 SMs)" in cache and "B200 (sm100, 148 SMs)" in cache
    log = wheels_image["result"].stdout + wheels_image["result"].stderr
    built = [line.split("fa4 kernels: ", 1)[1] for line in log.splitlines() if "fa4 kernels: " in line]
    assert any("a fresh process loaded them all with 0 compiles" in line for line in built), log[-4000:]


def test_one_kernel_compiled_on_the_cpu_is_served_from_the_cache_in_a_fresh_process(wheels_image):
    """Counted, not timed: the first process compiles (build), a fresh one replays the same call and compiles
    nothing (verify: it exits 1 on any compile)."""
    if wheels_image["name"] != DEVEL:
        pytest.skip("the runtime line has no flash-attn-4")
    script = (f"set -e; cat > /tmp/one.json; python {BUILD} build --out /tmp/one --targets /tmp/one.json --jobs 1; "
              f"python {BUILD} verify --out /tmp/one --jobs 1")
    done = docker_cli("run", "--rm", "-i", "--entrypoint", "bash", wheels_image["ref"], "-c", script,
                      input=json.dumps(ONE_KEY), check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    built = next(line for line in done.stdout.splitlines() if line.startswith("fa4 kernels: H100"))
    compiles = int(built.split("(")[2].split(" compiles")[0])
    verified = json.loads(done.stdout.strip().splitlines()[-1])["H100 SXM, H200"]
    assert compiles > 0 and verified["compiles"] == 0 and verified["keys"] > 0, done.stdout


def test_the_image_s_kernels_load_as_any_uid_on_a_read_only_root(wheels_image):
    """What a run does (runtime.seed into its writable cache), as uid 4242 with `--read-only --tmpfs /tmp`; then every
    case of every GPU replayed in a fresh process: 0 compiles."""
    if wheels_image["name"] != DEVEL:
        pytest.skip("the runtime line has no flash-attn-4")
    script = ("set -e; python - <<'PY'\n"
              "import json, os, pathlib, shutil\n"
              "from vlmgrpo.fa4kernels import runtime\n"
              "root = pathlib.Path(os.environ[runtime.KERNELS_VARIABLE])\n"
              "shipped = runtime.manifest()\n"
              "for gpu in shipped['gpus'].values():\n"
              "    runtime.seed(root / gpu['directory'], pathlib.Path('/tmp/k') / gpu['directory'])\n"
              "shutil.copy(root / 'manifest.json', '/tmp/k/manifest.json')\n"
              "PY\n"
              f"python {BUILD} verify --out /tmp/k")
    done = docker_cli("run", "--rm", "--read-only", "--tmpfs", "/tmp", "--user", "4242:4242", "--entrypoint", "bash",
                      wheels_image["ref"], "-c", script, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(reports) >= 2 and all(r["compiles"] == 0 and r["keys"] > 0 for r in reports.values()), reports


def test_an_edited_flash_attention_4_file_fails_the_cache_check_naming_it(wheels_image):
    """A derived image that patches one FA4 source: FA4 would file its kernels under another fingerprint and compile
    them all; the check says which file."""
    if wheels_image["name"] != DEVEL:
        pytest.skip("the runtime line has no flash-attn-4")
    script = ("set -e; echo '# planted' >> /opt/venv/lib/python3.11/site-packages/flash_attn/cute/interface.py; "
              "python -c 'from vlmgrpo.image.checks.flash_attn_4_cache import cache_check; print(*cache_check())'")
    done = docker_cli("run", "--rm", "--user", "0", "--entrypoint", "bash", wheels_image["ref"], "-c", script,
                      check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("fail flash_attn/cute/interface.py differs from the source"), line


def test_kernels_the_image_lacks_are_compiled_once_for_all_ranks(wheels_image):
    """Issue 52: a model whose attention the image has no kernels for (here heads of 128 in the ratio 2), on one GPU
    kind: two ranks start together; one compiles (build.py, on the CPU) while the other waits on the run cache's
    lock, then finds the first one's mark and compiles nothing."""
    if wheels_image["name"] != DEVEL:
        pytest.skip("the runtime line has no flash-attn-4")
    # One write per rank: the image sets PYTHONUNBUFFERED, so print() writes each piece on its own and the two ranks'
    # lines interleaved in CI ("10 None" then " 25 kernels in 63 s"); one short write to a pipe is atomic.
    rank = ("import sys, pathlib; from vlmgrpo.fa4kernels import runtime; "
            "family = {'text': {'hidden_size': 256, 'num_attention_heads': 2, 'num_key_value_heads': 1}}; "
            "result = runtime.compile_once(pathlib.Path('/tmp/run'), 90, 132, family); "
            "sys.stdout.write(f'{sys.argv[1]} {result}' + chr(10))")
    # each rank's exit status is checked: a bare `wait` answers 0 whatever they did
    script = (f"mkdir -p /tmp/run; python -c \"{rank}\" 0 & first=$!; python -c \"{rank}\" 1 & second=$!; "
              f"wait $first && wait $second && python {BUILD} verify --out /tmp/run --jobs 1")
    done = docker_cli("run", "--rm", "--entrypoint", "bash", wheels_image["ref"], "-c", script, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = sorted(line for line in done.stdout.splitlines() if line[:2] in ("0 ", "1 "))
    compiled = [line for line in said if line.endswith(" s")]
    assert len(said) == 2 and len(compiled) == 1 and sum(line.endswith("None") for line in said) == 1, (
        said, done.stdout[-3000:], done.stderr[-3000:])
    verified = json.loads(done.stdout.strip().splitlines()[-1])["this GPU"]
    assert verified["compiles"] == 0 and verified["keys"] > 0, verified
