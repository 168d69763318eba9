"""cuda.*: in an image with a CUDA toolkit (a devel image, on nvidia/cuda or on NVIDIA's wheels), the toolkit works
for what compiles against it at run time. Needs no GPU: both compile for TORCH_CUDA_ARCH_LIST, which no build can
read from a GPU.

cuda.kernel        nvcc (found as torch's cpp_extension finds it) compiles a kernel into a shared library, linked
                   against the CUDA runtime (-lcudart, which a toolkit laid out without libcudart.so cannot do), and
                   the library loads
cuda.deepspeed_op  (cuda_deepspeed_op, in an image with DeepSpeed) DeepSpeed's JIT builds an op with that nvcc

Both need a toolkit (NEEDS "toolkit"): on an image without one (no CUDA_HOME, no nvcc on PATH, nothing in
/usr/local/cuda: a runtime or CPU image) the runner skips them with that reason.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import Mapping, Optional

from vlmgrpo.image.checks import FAIL, PASS, Context, result
from vlmgrpo.image.checks._needs import toolkit_nvcc

NAMES = ("cuda.kernel",)
PHASE = "toolkit"
NEEDS = ("toolkit",)
KERNEL_TIMEOUT_S = 120  # a kernel into a shared library takes seconds; the bound is for a hung nvcc, not a slow one
DEFAULT_ARCH = "8.0"
KERNEL = """__global__ void imagegen_scale(float *x, float by) { x[threadIdx.x] *= by; }
extern "C" int imagegen_launch(float *x) { imagegen_scale<<<1, 1>>>(x, 2.0f); return 0; }
"""


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


def run(context: Context) -> list[dict[str, str]]:
    nvcc, _ = toolkit_nvcc(context.environ)  # found: the runner checked the "toolkit" need
    return [result("cuda.kernel", *kernel_check(nvcc, target_arch(context.expected), context.environ))]
