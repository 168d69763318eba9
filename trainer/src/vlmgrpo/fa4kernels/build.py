"""FlashAttention 4's kernels compiled ahead of time, without a GPU, into FA4's own persistent cache.

FA4 (flash-attn-4, `flash_attn.cute`) compiles each kernel with the CUTLASS DSL when a process first calls it: 21 s of
a first step on one H200, every rank of a run doing the same. Its persistent cache (flash_attn/cute/cache_utils.py:
FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED, _DIR) keeps one object file per compile key under a fingerprint of its
sources, the Python minor and the cutlass and tvm_ffi versions. Here the image's build fills one such cache per GPU
of targets.json, in the image's own interpreter (the keys are pickles, whose bytes vary with the Python patch release):

    python build.py build --out DIR     compile, then replay every case in a fresh process: nothing may compile
    python build.py verify --out DIR    that replay alone (the count of compiles it printed must be 0)

How, without a GPU: torch's FakeTensorMode gives CUDA tensors no device needs, FA4's host code then picks its config,
builds the key and compiles (its PTX compiler is inside the DSL: no ptxas, nvcc or driver), and launches nothing
(FA4's own testing.py and autotune.py use the same route). Forward and backward are FA4's autograd Functions'
static methods, called as transformers calls flash_attn_func / flash_attn_varlen_func (causal, softmax_scale
head_dim ** -0.5, deterministic False): torch's autograd engine wants a device for fake CUDA tensors. FA4 reads the
architecture once per process (FLASH_ATTENTION_ARCH, and CUTE_DSL_ARCH at cutlass's import): one worker per GPU.

Standard library at the top level: the image build runs this file before the trainer is installed, so that a change
to the trainer does not compile the kernels again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = Path(__file__).with_name("targets.json")
MANIFEST = "manifest.json"
FA4_OWN_MAJORS = (8, 12)  # flash_attn/cute/interface.py asserts compute capability 8.x to 12.x
# Each changes FA4's compile keys; the build clears them so that the image's keys are the ones a default run asks for.
KEY_VARIABLES = ("FA_LOG_LEVEL", "FLASH_ATTENTION_BWD_TILE_N", "FLASH_ATTENTION_BWD_PACK_GQA",
                 "FLASH_ATTENTION_BWD_HEAD_LOOP", "FA_DISABLE_2CTA", "FA_DISABLE_S_PING_PONG",
                 "FLASH_ATTENTION_SM100_BACKEND", "FLASH_ATTENTION_DETERMINISTIC")


def gpu_directory(gpu: dict) -> str:
    """Where a GPU kind's kernels go under the cache's root; a GPU entry may name its own (a run's cache)."""
    return gpu.get("directory") or f"sm{gpu['sm']}-{gpu['sms']}sms"


def case_key(case: dict) -> tuple:
    """What tells one attention call apart (its families and shapes aside)."""
    return case["head_dim"], case["ratio"], case["causal"], case["path"]


def cases(families: dict, shapes: dict) -> list[dict]:
    """The distinct attention calls of the families' training (text: causal, each ratio of query to key-value heads,
    unpadded, unpadded by transformers, packed; vision: not causal, varlen), each with its grid of shapes."""
    dense = [[b, s] for b in shapes["batches"] for s in shapes["sequences"]]
    varlen = sorted({(n, t, m) for t in shapes["varlen_tokens"] for n in shapes["varlen_sequences"] if n <= t
                     for m in {max(1, t // n), min(t, 64), min(t, 128), min(t, 4096)} if m * n >= t and m <= t})
    found: dict[tuple, dict] = {}
    for name, config in sorted((k, v) for k, v in families.items() if k != "about"):
        text = config["text"]
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        ratio = text["num_attention_heads"] // text["num_key_value_heads"]
        for path, grid in (("dense", dense), ("varlen-int", varlen), ("varlen-tensor", varlen)):
            found.setdefault((head_dim, ratio, True, path), {  # case_key's order
                "head_dim": head_dim, "ratio": ratio, "kv_heads": text["num_key_value_heads"], "causal": True,
                "path": path, "shapes": [list(s) for s in grid], "families": []})["families"].append(name)
        vision = config.get("vision")
        if vision:
            head_dim = vision["hidden_size"] // vision["num_heads"]
            grid = [list(s) for s in varlen]
            if vision.get("window_tokens"):
                grid += [[n, n * vision["window_tokens"], vision["window_tokens"]] for n in shapes["window_counts"]]
            case = found.setdefault((head_dim, 1, False, "varlen-int"), {
                "head_dim": head_dim, "ratio": 1, "kv_heads": vision["num_heads"], "causal": False,
                "path": "varlen-int", "shapes": [], "families": []})
            case["shapes"] = sorted({tuple(s) for s in case["shapes"] + grid})
            case["families"].append(name + " (vision)")
    return [dict(case, shapes=[list(s) for s in case["shapes"]]) for case in found.values()]


def gpus_for(gpus: dict, torch_archs: list[str], low_major: int) -> dict:
    """The GPUs of targets.json that the image's torch is built for (torch.cuda.get_arch_list(): sm_90, ...) and
    that FA4 runs on and transformers dispatches it to (from sm{low_major}0)."""
    built = {int(arch.split("_")[1].rstrip("af")) for arch in torch_archs if arch.startswith("sm_")}
    return {name: gpu for name, gpu in gpus.items() if name != "about" and gpu["sm"] in built
            and max(low_major, FA4_OWN_MAJORS[0]) <= gpu["sm"] // 10 <= FA4_OWN_MAJORS[1]}


def source_digests() -> dict[str, str]:
    """sha256 of each file FA4's fingerprint covers (every *.py under flash_attn/cute), to name the one that changed."""
    import importlib.util

    root = Path(importlib.util.find_spec("flash_attn.cute").origin).resolve().parent
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*.py")) if path.is_file()}


def worker_environment(out: Path, gpu: dict) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in KEY_VARIABLES}
    env.update(FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED="1",
               FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=str(out / gpu_directory(gpu)),
               FLASH_ATTENTION_ARCH=f"sm_{gpu['sm']}", CUTE_DSL_ARCH=gpu["target"],
               FLASH_ATTENTION_NUM_SMS=str(gpu["sms"]), CUTE_DSL_CACHE_DIR=str(out / ".cutlass"),
               PYTHONWARNINGS="ignore")
    return env


def run_workers(out: Path, gpus: dict, work: list[dict], mode: str, jobs: int) -> dict[str, dict]:
    """One worker process per GPU, `jobs` at a time: {gpu name: what it reported}."""
    pending, running, reports = list(gpus.items()), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            name, gpu = pending.pop(0)
            errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: the DSL's warnings never block the worker
            process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", mode],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                       text=True, env=worker_environment(out, gpu))
            process.stdin.write(json.dumps(work))
            process.stdin.close()
            running[name] = (process, time.monotonic(), errors)
        finished = [name for name, (process, _, _) in running.items() if process.poll() is not None]
        if not finished:  # a worker's report is one short JSON line at its end: it never fills the pipe
            time.sleep(0.2)
            continue
        name = finished[0]
        process, started, errors = running.pop(name)
        report = process.stdout.read()
        errors.seek(0)
        errors = errors.read()
        if process.returncode != 0:
            raise SystemExit(f"fa4 kernels: the {mode} worker for {name} failed ({process.returncode}):\n"
                             f"{errors[-3000:]}")
        reports[name] = dict(json.loads(report), seconds=round(time.monotonic() - started, 1))
    return reports


def files_of(directory: Path) -> dict[str, int]:
    return {path.relative_to(directory).as_posix(): path.stat().st_size for path in sorted(directory.rglob("*"))
            if path.is_file() and path.suffix in (".o", ".lock")}


def build(out: Path, targets_path: Path, jobs: int) -> dict:
    import torch
    from transformers.modeling_flash_attention_utils import FLASH_ATTENTION_COMPATIBILITY_MATRIX

    targets = json.loads(targets_path.read_text())
    low = FLASH_ATTENTION_COMPATIBILITY_MATRIX[4].get("cuda_min_major_version") or FA4_OWN_MAJORS[0]
    gpus = gpus_for(targets["gpus"], torch.cuda.get_arch_list(), low)
    if not gpus:
        raise SystemExit(f"fa4 kernels: no GPU of {targets_path} is one this torch ({torch.cuda.get_arch_list()}) "
                         f"and flash-attention 4 (sm{low}0 to sm{FA4_OWN_MAJORS[1]}x here) run on")
    work = cases(targets["families"], targets["shapes"])
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    compiled = run_workers(out, gpus, work, "compile", jobs)
    replayed = run_workers(out, gpus, work, "verify", jobs)
    for name, report in replayed.items():
        if report["compiles"]:
            raise SystemExit(f"fa4 kernels: a fresh process compiled {report['compiles']} kernels for {name} that the "
                             f"cache should have served: {report['compiled_kinds']}")
    fingerprint = {report["fingerprint"] for report in compiled.values()}
    if len(fingerprint) != 1:
        raise SystemExit(f"fa4 kernels: the workers computed different fingerprints: {sorted(fingerprint)}")
    manifest = {
        "format": 1, "fingerprint": fingerprint.pop(), "python": sys.version.split()[0],
        "sources": source_digests(), "targets": targets,
        "cases": [{k: v for k, v in case.items() if k != "shapes"} for case in work],
        "seconds": round(time.monotonic() - started, 1),
        "gpus": {name: dict(gpu, directory=gpu_directory(gpu), keys=compiled[name]["keys"],
                            compiles=compiled[name]["compiles"],
                            compile_seconds=compiled[name]["seconds"], load_seconds=replayed[name]["seconds"],
                            files=files_of(out / gpu_directory(gpu)))
                 for name, gpu in gpus.items()}}
    (out / (MANIFEST + ".tmp")).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(out / (MANIFEST + ".tmp"), out / MANIFEST)
    return manifest


def verify(out: Path, jobs: int) -> dict[str, dict]:
    manifest = json.loads((out / MANIFEST).read_text())
    work = cases(manifest["targets"]["families"], manifest["targets"]["shapes"])
    return run_workers(out, manifest["gpus"], work, "verify", jobs)


def worker(mode: str) -> None:
    """Replay every case's shapes through FA4's forward and backward on fake CUDA tensors; report the keys its caches
    hold and how many compiles ran (in verify mode each must have been served by the cache: 0)."""
    work = json.load(sys.stdin)
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from flash_attn.cute import interface
    from flash_attn.cute.cache_utils import _compute_source_fingerprint

    hardware_info_from_environment()
    compiles: list[str] = []
    compile_function = interface.cute.compile

    def counted(*args, **kwargs):
        compiles.append(getattr(args[0], "__name__", type(args[0]).__name__) if args else "?")
        return compile_function(*args, **kwargs)

    interface.cute.compile = counted

    class Context:  # what torch.autograd.Function's ctx gives forward and backward
        def save_for_backward(self, *tensors):
            self.saved_tensors = tensors

        def set_materialize_grads(self, value):
            pass

    with FakeTensorMode():
        for case in work:
            for shape in case["shapes"]:
                replay(torch, interface, Context(), case, shape)
    kinds: dict[str, int] = {}
    for name in compiles:
        kinds[name] = kinds.get(name, 0) + 1
    keys = len(list(Path(os.environ["FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"]).rglob("*.o")))
    json.dump({"fingerprint": _compute_source_fingerprint(), "compiles": len(compiles), "compiled_kinds": kinds,
               "keys": keys, "mode": mode}, sys.stdout)


def replay(torch, interface, context, case: dict, shape: list) -> None:
    """One training call of FA4, forward then backward, as transformers makes it (fake tensors: nothing runs)."""
    def empty(*sizes):
        return torch.empty(*sizes, dtype=torch.bfloat16, device="cuda", requires_grad=True)

    d, ratio, kv = case["head_dim"], case["ratio"], case["kv_heads"]
    options = dict(softmax_scale=d ** -0.5, causal=case["causal"], deterministic=False)
    if case["path"] == "dense":
        batch, length = shape  # transformers' (batch, heads, length, dim), transposed
        q = empty(batch, kv * ratio, length, d).transpose(1, 2)
        k, v = (empty(batch, kv, length, d).transpose(1, 2) for _ in range(2))
        out, _ = interface.FlashAttnFunc.forward(context, q, k, v, **options)
        interface.FlashAttnFunc.backward(context, torch.empty_like(out), None)
        return
    sequences, tokens, longest = shape
    q, k, v = empty(tokens, kv * ratio, d), empty(tokens, kv, d), empty(tokens, kv, d)
    starts = torch.empty(sequences + 1, dtype=torch.int32, device="cuda")
    if case["path"] == "varlen-tensor":
        longest = torch.empty((), dtype=torch.int32, device="cuda")
    out, _ = interface.FlashAttnVarlenFunc.forward(context, q, k, v, cu_seqlens_q=starts, cu_seqlens_k=starts,
                                                   max_seqlen_q=longest, max_seqlen_k=longest, **options)
    interface.FlashAttnVarlenFunc.backward(context, torch.empty_like(out), None)


def hardware_info_from_environment() -> None:
    """FA4's SM100 persistent schedulers ask the driver for the SM count while compiling
    (flash_attn/cute/tile_scheduler.py, through cutlass.utils.HardwareInfo) and bake it into the kernel. Without a
    driver that fails: the count is FLASH_ATTENTION_NUM_SMS, what a GPU of the target's model reports. With a driver
    nothing is replaced."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return
    except OSError:
        pass
    import cutlass.utils
    import cutlass.utils.hardware_info as hardware_info
    import flash_attn.cute.tile_scheduler as tile_scheduler

    class FromEnvironment:
        def __init__(self, device_id: int = 0):
            self.device_id = device_id

        def get_device_multiprocessor_count(self) -> int:
            return int(os.environ["FLASH_ATTENTION_NUM_SMS"])

        def get_max_active_clusters(self, cluster_size: int, stream=None) -> int:
            return int(os.environ["FLASH_ATTENTION_NUM_SMS"]) // cluster_size

    cutlass.utils.HardwareInfo = hardware_info.HardwareInfo = tile_scheduler.HardwareInfo = FromEnvironment


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("build", "verify", "worker"))
    parser.add_argument("mode", nargs="?", choices=("compile", "verify"))
    parser.add_argument("--out", type=Path, help="the cache's root: a directory per GPU, and manifest.json")
    parser.add_argument("--targets", type=Path, default=TARGETS, help="families, GPUs and shapes (targets.json)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="GPUs compiled side by side")
    arguments = parser.parse_args(argv)
    if arguments.action == "worker":
        return worker(arguments.mode)
    if arguments.action == "build":
        manifest = build(arguments.out, arguments.targets, arguments.jobs)
        for name, gpu in manifest["gpus"].items():
            size = sum(size for path, size in gpu["files"].items() if path.endswith(".o"))
            print(f"fa4 kernels: {name} (sm{gpu['sm']}, {gpu['sms']} SMs): {gpu['keys']} kernels, {size / 1e6:.2f} MB "
                  f"({gpu['compiles']} compiles in {gpu['compile_seconds']} s); a fresh process loaded them all with "
                  f"0 compiles in {gpu['load_seconds']} s")
        print(f"fa4 kernels: {len(manifest['cases'])} attention cases, {manifest['seconds']} s in all")
        return None
    reports = verify(arguments.out, arguments.jobs)
    print(json.dumps(reports, sort_keys=True))
    if any(report["compiles"] for report in reports.values()):
        raise SystemExit(1)
    return None


if __name__ == "__main__":
    main(sys.argv[1:])
