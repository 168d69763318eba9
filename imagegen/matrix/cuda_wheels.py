"""CUDA from NVIDIA's wheels on PyPI: an image that names both `cuda` and `base` (with `os`) gets its CUDA from
`cuda-toolkit` and the nvidia-* wheels it pins, on that base (a Debian one, say), instead of FROM nvidia/cuda.
Such images build wherever PyPI and an OS archive answer: no Docker Hub, no NVIDIA registry.

What the wheels hold decides what such an image can be (read from the wheels themselves, 2026-12-02):
- CUDA 13's `nvidia-cuda-nvcc` wheels (13.0.88 ...) ship the whole compiler (nvcc, cudafe++, fatbinary, nvlink,
  ptxas; cicc in `nvidia-nvvm`) and put it, the headers and every CUDA 13 library under one site-packages/nvidia/cu13
  folder: a devel image (nvcc, DeepSpeed's JIT ops, kernels) on wheels works.
- CUDA 12's `nvidia-cuda-nvcc-cu12` wheels ship ptxas and libnvvm only, no nvcc (12.4.131, 12.6.85, 12.8.93 and
  12.9.86 checked): a CUDA 12 line on wheels is a runtime image (torch's own CUDA libraries), never a devel one.

Pure functions on the matrix; the rule's problems name the file, line and key.
"""

from __future__ import annotations

from imagegen.core.errors import Problem
from imagegen.matrix.model import ImageEntry, Matrix

TOOLKIT = "cuda-toolkit"  # NVIDIA's meta-package: one extra per part, each pinning NVIDIA's own wheel
FIRST_NVCC_MAJOR = 13  # the first CUDA major whose nvcc wheel ships nvcc itself (see above)
# The parts a devel image installs: the compiler (nvcc brings nvvm and the crt headers), the runtime and its headers,
# CCCL (CUB, Thrust, libcu++), NVRTC, and the math libraries whose headers torch's CUDA headers include
# (ATen/cuda/CUDAContext.h: cuBLAS, cuSPARSE, cuSOLVER; cuRAND for kernels that draw numbers).
DEVEL_PARTS = ("nvcc", "cudart", "cccl", "nvrtc", "cublas", "cusparse", "cusolver", "curand")
# What a devel image's CUDA looks like to every tool: NVIDIA's images keep the toolkit in /usr/local/cuda.
CUDA_HOME = "/usr/local/cuda"


def from_wheels(image: ImageEntry) -> bool:
    """Whether the image's CUDA comes from NVIDIA's wheels on a base of its own (both `cuda` and `base` set)."""
    return image.cuda is not None and image.base is not None


def toolkit_requirement(cuda_minor: str) -> str:
    """The devel parts of the toolkit at the image's CUDA line; the lock picks the update torch's wheels pin
    (torch 2.14.1's CUDA 13.0 build requires cuda-toolkit 13.0.3.0, so 13.0.* resolves to it)."""
    return f"{TOOLKIT}[{','.join(DEVEL_PARTS)}]=={cuda_minor}.*"


def check(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    """A devel image on wheels needs a CUDA major whose nvcc wheel ships nvcc."""
    if not from_wheels(image) or image.flavor != "devel":
        return []
    major = int(image.cuda.split(".")[0])
    if major >= FIRST_NVCC_MAJOR:
        return []
    return [matrix.problem(("images", image.index, "cuda"),
                           f"CUDA {image.cuda} from NVIDIA's wheels has no nvcc (the nvidia-cuda-nvcc-cu{major} wheels "
                           f"ship ptxas and libnvvm only), so it cannot be a devel image: set flavor: runtime, "
                           f"use CUDA {FIRST_NVCC_MAJOR}.x, or drop base for the nvidia/cuda base", "cuda-wheels-nvcc")]
