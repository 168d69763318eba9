"""audit.cuda_duplicates: which CUDA libraries the image carries twice, in the base image and in torch's nvidia-*
wheels, with their sizes. cuDNN twice fails: nothing in an image compiles against it, so the base's copy is only
weight (the bases are the -devel-/-runtime- tags, not -cudnn-). The toolkit's libraries beside torch's (cuBLAS,
cuFFT...) and the NCCL nvidia/cuda's -devel- and -runtime- tags install are listed and pass: they come with the
base nvcc is on, which flash-attn and DeepSpeed's ops compile with.
Needs no GPU."""

from __future__ import annotations

import os
import re
from typing import Iterable

from vlmgrpo.checks import FAIL, PASS, SKIP, Context, result

NAMES = ("audit.cuda_duplicates",)
PHASE = "libraries"
NEEDS = ()
# Where CUDA base images keep their libraries; torch's nvidia-* wheels keep theirs under site-packages/nvidia.
BASE_CUDA_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu")
_LIBRARY = re.compile(r"^(lib[\w+-]+?)\.so(\.\d+)*$")


def library_bytes(directories: Iterable[str]) -> dict[str, int]:
    """Bytes per CUDA-family library (libcublas, libcudnn_ops, ...) in these directories, links not counted."""
    sizes: dict[str, int] = {}
    for directory in directories:
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            match = _LIBRARY.match(entry.name)
            if match and entry.is_file(follow_symlinks=False) and _is_cuda_library(match.group(1)):
                sizes[match.group(1)] = sizes.get(match.group(1), 0) + entry.stat().st_size
    return sizes


CUDA_LIBRARIES = ("libcudart", "libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse", "libcudnn",
                  "libcupti", "libcufile", "libnccl", "libnvrtc", "libnvJitLink", "libnvToolsExt", "libnvjpeg", "libnpp",
                  "libnvshmem", "libnvperf", "libnvtx")


# What torch's wheels bring, nothing in an image compiles against, and a base can leave out (its tag without cuDNN).
NEVER_TWICE = ("libcudnn",)


def _is_cuda_library(name: str) -> bool:
    return name.startswith(CUDA_LIBRARIES)


def wheel_library_dirs() -> list[str]:
    """The lib/ directories of torch's nvidia-* wheels (site-packages/nvidia/<part>/lib)."""
    try:
        import nvidia
    except ImportError:
        return []
    roots = list(getattr(nvidia, "__path__", []))
    return [os.path.join(root, part, "lib") for root in roots for part in sorted(os.listdir(root))]


def duplicates_check(base_dirs: Iterable[str] = BASE_CUDA_DIRS) -> tuple[str, str]:
    base, wheels = library_bytes(base_dirs), library_bytes(wheel_library_dirs())
    if not base:
        return SKIP, f"no CUDA library in the base image ({', '.join(base_dirs)}); torch's nvidia-* wheels " \
                     f"hold {_mb(sum(wheels.values()))}"
    twice = sorted(set(base) & set(wheels), key=lambda name: -(base[name] + wheels[name]))
    if not twice:
        return PASS, f"no CUDA library twice: the base has {_mb(sum(base.values()))}, the wheels " \
                     f"{_mb(sum(wheels.values()))}"
    listed = "; ".join(f"{name} {_mb(base[name])} in the base + {_mb(wheels[name])} in a wheel" for name in twice)
    total = sum(min(base[name], wheels[name]) for name in twice)
    needless = [name for name in twice if name.startswith(NEVER_TWICE)]
    if needless:
        return FAIL, (f"{', '.join(needless)} both in the base image and in torch's wheels, which torch loads: "
                      f"{_mb(sum(base[name] for name in needless))} of the base's are never used; build on the "
                      f"base's tag without cuDNN (nvidia/cuda:X-devel-..., not -cudnn-devel-). "
                      f"All twice: {listed}")[:2000]
    return PASS, f"{len(twice)} CUDA libraries twice, at least {_mb(total)} duplicated: {listed}"[:2000]


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def run(context: Context) -> list[dict[str, str]]:
    return [result("audit.cuda_duplicates", *duplicates_check())]
