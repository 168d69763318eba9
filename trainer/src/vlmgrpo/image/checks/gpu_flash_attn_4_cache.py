"""gpu.flash_attn_4_cache: on this GPU, FlashAttention 4's first call loads its kernels from the image's cache and
compiles none (flash_attn_4.cache checks the cache's files without a GPU). A fresh process, since FA4 reads its
cache's place when imported: the image's kernels for this GPU kind copied into a temporary cache as a run's start
copies them (fa4kernels/runtime.py), then one causal forward and backward at a shape the image compiled for (a text
case of its manifest). Each of FA4's kernel caches then holds what it used: a function loaded from an object file
(tvm_ffi's Function) or one compiled in the process, which is counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.flash_attn_4_cache",)
PHASE = "gpu"
NEEDS = ("flash_attn_4", "gpu", "fa4_arch")
KERNEL_CACHES = ("_flash_attn_fwd", "_flash_attn_bwd", "_bwd_preprocess", "_bwd_postprocess_convert")

# Run in the fresh process: argv[1] the case (head_dim, ratio, kv_heads); prints {"loaded": n, "compiled": n}.
FIRST_CALL = """
import json, sys
import torch
from flash_attn.cute import flash_attn_func, interface
case = json.loads(sys.argv[1])
d, ratio, kv = case["head_dim"], case["ratio"], case["kv_heads"]
q = torch.randn(1, 1024, kv * ratio, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k, v = (torch.randn(1, 1024, kv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
out = flash_attn_func(q, k, v, softmax_scale=d ** -0.5, causal=True)
out = out[0] if isinstance(out, tuple) else out
out.float().sum().backward()
torch.cuda.synchronize()
counted = {"loaded": 0, "compiled": 0}
for name in sys.argv[2:]:
    cache = getattr(getattr(interface, name, None), "compile_cache", None)
    for function in (getattr(cache, "cache", None) or {}).values():
        counted["loaded" if type(function).__module__.startswith("tvm_ffi") else "compiled"] += 1
print(json.dumps(counted))
"""


def cache_check() -> tuple[str, str]:
    import torch

    from vlmgrpo.fa4kernels import runtime

    shipped = runtime.manifest()
    if shipped is None:
        return FAIL, f"no kernel cache in this image ({runtime.KERNELS_VARIABLE}): flash_attn_4.cache says why"
    major, minor = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    found = runtime.shipped_gpu(shipped, major * 10 + minor, sms)
    if found is None:
        return PASS, (f"the image has no kernels for this GPU (sm{major}{minor}, {sms} SMs; it has "
                      f"{runtime.kinds(shipped)}): a run compiles its model's once, before the first step")
    case = next(case for case in shipped["cases"] if case["causal"] and case["path"] == "dense")
    with tempfile.TemporaryDirectory(prefix="fa4-cache-") as cache:
        runtime.seed(Path(os.environ[runtime.KERNELS_VARIABLE]) / found[1]["directory"], Path(cache))
        env = {**os.environ, runtime.CACHE_ENABLED: "1", runtime.CACHE_DIR: cache}
        done = subprocess.run([sys.executable, "-c", FIRST_CALL, json.dumps(case), *KERNEL_CACHES], env=env,
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return FAIL, f"FA4's first call failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:300]}"
    counted = json.loads(done.stdout.strip().splitlines()[-1])
    detail = (f"{found[0]} (sm{major}{minor}, {sms} SMs), heads of {case['head_dim']} in the ratio {case['ratio']}: "
              f"{counted['loaded']} kernels loaded from the image's cache, {counted['compiled']} compiled")
    return (PASS if counted["compiled"] == 0 and counted["loaded"] else FAIL), detail


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.flash_attn_4_cache", *cache_check())]
