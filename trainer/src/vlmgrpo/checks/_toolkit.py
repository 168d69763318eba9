"""Where a CUDA toolkit is, as torch's cpp_extension (and so FlashInfer's and DeepSpeed's JITs) finds it: the
"toolkit" need of the check runner, and the nvcc the toolkit and vLLM checks compile with. Not a check (its name
starts with "_")."""

from __future__ import annotations

import os
import shutil
from typing import Callable, Mapping, Optional

DEFAULT_CUDA_HOME = "/usr/local/cuda"


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
