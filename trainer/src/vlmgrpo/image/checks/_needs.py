"""What the check runner's needs look for on this machine, and the checks then use: a CUDA toolkit, as torch's
cpp_extension (and so FlashInfer's and DeepSpeed's JITs) finds it (the "toolkit" need; the nvcc the toolkit and vLLM
checks compile with), the InfiniBand/RoCE devices with the RDMA user space NCCL loads for them (the "rdma" need), the
compiled files of the stack's own packages ("compiled_code"), the CUDA libraries of the base image and of torch's
nvidia-* wheels ("base_cuda"), a torch built for CUDA ("cuda_torch") and a GPU in flash-attention 4's range
("fa4_arch"). Each need returns (met, why not): the runner, not a check, decides from it whether a check applies.
Not a check (its name starts with "_")."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
from importlib import metadata
from typing import Callable, Iterable, Mapping, Optional

DEFAULT_CUDA_HOME = "/usr/local/cuda"
RDMA_LIBRARY = "libibverbs.so.1"
RDMA_DEVICES = "/sys/class/infiniband"
EXTENSION_DISTRIBUTIONS = ("torchvision", "flash-attn", "deepspeed")  # the stack's packages with compiled code
# Where CUDA base images keep their libraries; torch's nvidia-* wheels keep theirs under site-packages/nvidia.
BASE_CUDA_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu")
CUDA_LIBRARIES = ("libcudart", "libcublas", "libcufft", "libcurand", "libcusolver", "libcusparse", "libcudnn",
                  "libcupti", "libcufile", "libnccl", "libnvrtc", "libnvJitLink", "libnvToolsExt", "libnvjpeg", "libnpp",
                  "libnvshmem", "libnvperf", "libnvtx")
_LIBRARY = re.compile(r"^(lib[\w+-]+?)\.so(\.\d+)*$")


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


def shared_objects(distributions: Iterable[str]) -> list[str]:
    """Every .so file the named distributions installed (those installed; absent ones are skipped)."""
    found = []
    for name in distributions:
        try:
            files = metadata.distribution(name).files or []
        except metadata.PackageNotFoundError:
            continue
        found += sorted(str(f.locate()) for f in files if re.search(r"\.so(\.\d+)*$", f.name))
    return found


def compiled_code() -> tuple[bool, str]:
    """Whether one of the stack's packages ships compiled files (the "compiled_code" need of abi.extensions)."""
    if shared_objects(EXTENSION_DISTRIBUTIONS):
        return True, ""
    return False, f"none of {', '.join(EXTENSION_DISTRIBUTIONS)} ships compiled code here"


def library_bytes(directories: Iterable[str]) -> dict[str, int]:
    """Bytes per CUDA-family library (libcublas, libcudnn_ops, ...) in these directories, links not counted."""
    sizes: dict[str, int] = {}
    for directory in directories:
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            match = _LIBRARY.match(entry.name)
            if match and entry.is_file(follow_symlinks=False) and match.group(1).startswith(CUDA_LIBRARIES):
                sizes[match.group(1)] = sizes.get(match.group(1), 0) + entry.stat().st_size
    return sizes


def wheel_library_dirs() -> list[str]:
    """The lib/ directories of torch's nvidia-* wheels (site-packages/nvidia/<part>/lib)."""
    try:
        import nvidia
    except ImportError:
        return []
    roots = list(getattr(nvidia, "__path__", []))
    return [os.path.join(root, part, "lib") for root in roots for part in sorted(os.listdir(root))]


def megabytes(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def base_cuda() -> tuple[bool, str]:
    """Whether the base image holds CUDA libraries (the "base_cuda" need of audit.cuda_duplicates); BASE_CUDA_DIRS is
    read when asked, so that a test can point it elsewhere."""
    if library_bytes(BASE_CUDA_DIRS):
        return True, ""
    return False, (f"no CUDA library in the base image ({', '.join(BASE_CUDA_DIRS)}); torch's nvidia-* wheels "
                   f"hold {megabytes(sum(library_bytes(wheel_library_dirs()).values()))}")


def cuda_torch() -> tuple[bool, str]:
    """Whether torch is a CUDA build (the "cuda_torch" need of cuda.archs). A torch that cannot say counts as met: the
    check then fails saying why."""
    try:
        import torch

        flags = torch._C._cuda_getArchFlags()  # what torch was compiled for; needs no GPU, unlike get_arch_list()
    except (ImportError, AttributeError):
        return True, ""
    if flags:
        return True, ""
    return False, f"torch {torch.__version__} is a CPU-only build; the CUDA architectures do not apply"


def fa4_arch() -> tuple[bool, str]:
    """Whether GPU 0 is in flash-attention 4's range here (the "fa4_arch" need; the runner asks it only once a GPU is
    visible)."""
    import torch

    from vlmgrpo.models.attention import fa4_majors

    major, minor = torch.cuda.get_device_capability()
    low, high = fa4_majors()
    if low <= major <= high:
        return True, ""
    return False, f"GPU 0 is sm{major}{minor}; flash-attention 4 runs on sm{low}0 to sm{high}x here"
