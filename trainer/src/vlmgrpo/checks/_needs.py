"""What the check runner's needs look for on this machine, and the checks then use: a CUDA toolkit, as torch's
cpp_extension (and so FlashInfer's and DeepSpeed's JITs) finds it (the "toolkit" need; the nvcc the toolkit and vLLM
checks compile with), and the InfiniBand/RoCE devices with the RDMA user space NCCL loads for them (the "rdma" need).
Not a check (its name starts with "_")."""

from __future__ import annotations

import ctypes
import os
import shutil
from typing import Callable, Mapping, Optional

DEFAULT_CUDA_HOME = "/usr/local/cuda"
RDMA_LIBRARY = "libibverbs.so.1"
RDMA_DEVICES = "/sys/class/infiniband"


def find_nvcc(env: Mapping[str, str], which: Callable[[str], Optional[str]] = shutil.which,
              exists: Callable[[str], bool] = os.path.exists) -> tuple[Optional[str], str]:
    """nvcc where torch's cpp_extension (and so FlashInfer's JIT) looks: CUDA_HOME/CUDA_PATH, PATH, /usr/local/cuda."""
    for variable in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(variable):
            path = os.path.join(env[variable], "bin", "nvcc")
            return (path if exists(path) else None), f"{variable}={env[variable]}"
    on_path = which("nvcc")
    if on_path:
        return on_path, "PATH"
    path = os.path.join(DEFAULT_CUDA_HOME, "bin", "nvcc")
    return (path if exists(path) else None), f"no CUDA_HOME, no nvcc on PATH, {DEFAULT_CUDA_HOME}"


def toolkit_nvcc(env: Mapping[str, str]) -> tuple[Optional[str], str]:
    """(nvcc, "") where torch's cpp_extension finds it, else (None, why the checks that need a toolkit skip)."""
    nvcc, where = find_nvcc(env)
    return (nvcc, "") if nvcc else (None, f"no CUDA toolkit in this image ({where}): a runtime or CPU image")


def rdma_library_problem() -> Optional[str]:
    try:
        ctypes.CDLL(RDMA_LIBRARY)
    except OSError as exc:
        return f"{RDMA_LIBRARY} does not load ({exc})"
    return None


def rdma_devices() -> list[str]:
    return sorted(os.listdir(RDMA_DEVICES)) if os.path.isdir(RDMA_DEVICES) else []


def rdma_device() -> tuple[bool, str]:
    """Whether an InfiniBand/RoCE device is visible, and otherwise why the check skips (with the library's state, which
    a user adding a device next wants to know)."""
    if rdma_devices():
        return True, ""
    library = rdma_library_problem() or f"{RDMA_LIBRARY} loads"
    return False, f"no InfiniBand/RoCE device visible (NCCL uses TCP sockets); {library}"
