"""Checks of the image that need no GPU: its compiled extensions load, torch was built for the
GPUs the image is for, and which CUDA libraries it carries twice.

Each returns (status, detail) for `vlmgrpo selftest`; they run outside an image too.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import re
from importlib import metadata
from typing import Iterable, Optional

PASS, FAIL, SKIP = "pass", "fail", "skip"
# The stack's own compiled code: flash-attn's CUDA module, DeepSpeed's prebuilt ops, torchvision's ops.
EXTENSION_DISTRIBUTIONS = ("torchvision", "flash-attn", "deepspeed")
# Where CUDA base images keep their libraries; torch's nvidia-* wheels keep theirs under site-packages/nvidia.
BASE_CUDA_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_LIBRARY = re.compile(r"^(lib[\w+-]+?)\.so(\.\d+)*$")


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


def load_extension(path: str) -> Optional[str]:
    """Load one compiled file the way Python would, not through its package; None, or why it failed.

    An extension module (it has PyInit_<name>) is imported from its file; any other shared
    library is dlopen()ed. Both resolve every symbol at once, so a wrong ABI shows here.
    """
    module = os.path.basename(path).split(".")[0]
    try:
        spec = importlib.util.spec_from_file_location(module, path, loader=importlib.machinery.ExtensionFileLoader(
            module, path))
        importlib.util.module_from_spec(spec)
        return None
    except ImportError as error:
        if "module export function" not in str(error):
            return _why(error)
    try:
        ctypes.CDLL(path)
        return None
    except OSError as error:
        return _why(error)


def _why(error: Exception) -> str:
    undefined = _UNDEFINED.search(str(error))
    return f"undefined symbol {undefined.group(1)}" if undefined else str(error).splitlines()[0][:300]


def extensions_check(distributions: Iterable[str] = EXTENSION_DISTRIBUTIONS) -> tuple[str, str]:
    try:
        import torch  # noqa: F401  -- extensions resolve torch's symbols from the libraries it loads
    except ImportError as error:
        return FAIL, f"torch not importable: {error}"
    paths = shared_objects(distributions)
    if not paths:
        return SKIP, f"none of {', '.join(distributions)} ships compiled code here"
    failures = [f"{_short(path)}: {why}" for path in paths for why in [load_extension(path)] if why]
    if failures:
        return FAIL, "; ".join(failures)[:2000]
    return PASS, f"{len(paths)} compiled files load: " + ", ".join(_short(path) for path in paths)[:1500]


def _short(path: str) -> str:
    marker = f"{os.sep}site-packages{os.sep}"
    return path.split(marker, 1)[-1]


def covers(arch_flags: list[str], arch: str) -> bool:
    """Whether torch built with `arch_flags` (sm_80, compute_90, ...) runs on compute capability `arch`.

    A cubin for sm_XY runs on X.Y and later minors of the same major; PTX (compute_XY) is
    compiled on the fly for X.Y and every later architecture. Arch-specific builds (sm_90a) do not count.
    """
    major, minor = (int(part) for part in arch.split("."))
    for flag in arch_flags:
        kind, _, number = flag.partition("_")
        if not number.isdigit():
            continue
        built = (int(number[:-1]), int(number[-1]))
        if kind == "sm" and built[0] == major and built[1] <= minor:
            return True
        if kind == "compute" and built <= (major, minor):
            return True
    return False


def archs_check(expected: Optional[dict]) -> tuple[str, str]:
    wanted = (expected or {}).get("cuda_archs") or []
    if not wanted:
        return SKIP, "the matrix lists no CUDA architectures for this image"
    try:
        import torch

        flags = torch._C._cuda_getArchFlags()  # what torch was compiled for; needs no GPU, unlike get_arch_list()
    except (ImportError, AttributeError) as error:
        return FAIL, f"torch cannot say which architectures it was built for: {error}"
    if not flags:
        return SKIP, f"torch {torch.__version__} is a CPU-only build; the CUDA architectures do not apply"
    built = flags.split()
    missing = [arch for arch in wanted if not covers(built, arch)]
    if missing:
        return FAIL, f"torch is built for {' '.join(built)}, which does not run on {', '.join(missing)}"
    return PASS, f"torch's {' '.join(built)} cover {', '.join(wanted)}"


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
    return PASS, f"{len(twice)} CUDA libraries twice, at least {_mb(total)} duplicated: {listed}"[:2000]


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"
