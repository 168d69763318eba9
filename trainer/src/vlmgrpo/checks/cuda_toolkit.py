"""cuda.*: in an image with a CUDA toolkit (a devel image, on nvidia/cuda or on NVIDIA's wheels), the toolkit works
for what compiles against it at run time. Needs no GPU: both compile for TORCH_CUDA_ARCH_LIST, which no build can
read from a GPU.

cuda.kernel        nvcc (found as torch's cpp_extension finds it) compiles a kernel into a shared library, linked
                   against the CUDA runtime (-lcudart, which a toolkit laid out without libcudart.so cannot do), and
                   the library loads
cuda.deepspeed_op  DeepSpeed's JIT builds its FusedAdam op with that nvcc against the image's torch, and the op loads
                   (what ZeRO's optimizer needs first); a skip where DeepSpeed is neither installed nor expected

An image without a toolkit (no CUDA_HOME, no nvcc on PATH, nothing in /usr/local/cuda: a runtime or CPU image) skips
both with that reason.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from typing import Mapping, Optional

from vlmgrpo.inventory import installed_version
from vlmgrpo.checks import FAIL, PASS, SKIP, Context, expected_version, result
from vlmgrpo.checks.vllm_runtime import find_nvcc

NAMES = ("cuda.kernel", "cuda.deepspeed_op")
ORDER = 56
NEEDS_GPU = False
KERNEL_TIMEOUT_S = 120  # a kernel into a shared library: about 3 s here
DEEPSPEED_TIMEOUT_S = 900  # FusedAdam's two files against torch's headers, one architecture: minutes on 2 cores
DEFAULT_ARCH = "8.0"
KERNEL = """__global__ void imagegen_scale(float *x, float by) { x[threadIdx.x] *= by; }
extern "C" int imagegen_launch(float *x) { imagegen_scale<<<1, 1>>>(x, 2.0f); return 0; }
"""
FUSED_ADAM = ("from deepspeed.ops.op_builder import FusedAdamBuilder; "
              "module = FusedAdamBuilder().load(verbose=False); "
              "print('loaded', module.__name__, module.__file__)")


def target_arch(expected: Optional[dict]) -> str:
    """One architecture to compile for: the newest the image is for (one is enough to prove the toolkit)."""
    archs = (expected or {}).get("cuda_archs") or []
    return archs[-1] if archs else DEFAULT_ARCH


def kernel_check(nvcc: str, arch: str, env: Mapping[str, str]) -> tuple[str, str]:
    gencode = f"-gencode=arch=compute_{arch.replace('.', '')},code=sm_{arch.replace('.', '')}"
    with tempfile.TemporaryDirectory() as folder:
        source, library = os.path.join(folder, "probe.cu"), os.path.join(folder, "libprobe.so")
        with open(source, "w") as stream:
            stream.write(KERNEL)
        command = [nvcc, gencode, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", source, "-o", library]
        done = subprocess.run(command, capture_output=True, text=True, timeout=KERNEL_TIMEOUT_S, env=dict(env))
        if done.returncode != 0:
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            # the cause, not the linker's summary: "ld: cannot find -lcudart" before "collect2: error: ld returned 1"
            cause = next((line for line in lines if "error" in line or "cannot find" in line), lines[-1] if lines else "")
            return FAIL, f"{' '.join(command[:2])} ... cannot compile and link a kernel: {cause.strip()}"
        try:
            ctypes.CDLL(library)
        except OSError as error:
            return FAIL, f"the kernel's library (linked against libcudart) does not load: {error}"
    return PASS, f"{nvcc} compiles a kernel for sm_{arch.replace('.', '')} into a library linked to libcudart; it loads"


def deepspeed_check(env: Mapping[str, str], arch: str) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        variables = {**env, "TORCH_EXTENSIONS_DIR": folder, "TORCH_CUDA_ARCH_LIST": arch}
        try:
            done = subprocess.run([sys.executable, "-c", FUSED_ADAM], capture_output=True, text=True,
                                  timeout=DEEPSPEED_TIMEOUT_S, env=variables)
        except subprocess.TimeoutExpired:
            return FAIL, f"DeepSpeed's FusedAdam did not build within {DEEPSPEED_TIMEOUT_S} s"
    if done.returncode != 0:
        errors = [line for line in (done.stderr + done.stdout).splitlines() if "error" in line.lower()]
        last = (errors or (done.stderr.strip() or done.stdout.strip()).splitlines() or [""])[-1]
        return FAIL, f"DeepSpeed's JIT cannot build FusedAdam: {last.strip()[:500]}"
    return PASS, f"DeepSpeed {installed_version('deepspeed')} built FusedAdam for sm_{arch.replace('.', '')} and loaded it"


def run(context: Context, env: Mapping[str, str] = os.environ) -> list[dict[str, str]]:
    nvcc, where = find_nvcc(env)
    if nvcc is None:
        why = f"no CUDA toolkit in this image ({where}): a runtime or CPU image"
        return [result(name, SKIP, why) for name in NAMES]
    arch = target_arch(context.expected)
    results = [result("cuda.kernel", *kernel_check(nvcc, arch, env))]
    if installed_version("deepspeed") is None:
        wanted = expected_version(context.expected, "deepspeed")
        results.append(result("cuda.deepspeed_op", FAIL if wanted else SKIP, "deepspeed not installed"))
    else:
        results.append(result("cuda.deepspeed_op", *deepspeed_check(env, arch)))
    return results
