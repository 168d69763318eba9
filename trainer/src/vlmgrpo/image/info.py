"""`vlmgrpo info`: library versions and hardware, as the image's users and `imagegen test` see them.

The versions are inventory.component_versions' (read without importing torch): in an imagegen image, the components its
expected file names (imagegen's one table of components); elsewhere, vlmgrpo's own requirements. torch's runtime view
(torch, torch_cuda, cudnn, nccl) is added when torch imports, then the hardware.
"""

from __future__ import annotations

import os
import re
from importlib import metadata
from typing import Any, Optional

from imagegen_contract.expected import read as read_expected
from imagegen_contract.inventory import component_versions
from vlmgrpo.image.environment import CACHES

_REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def expected_path(option: Optional[str]) -> Optional[str]:
    """The expected-versions file: the option, else $IMAGEGEN_EXPECTED (the image sets it), else none."""
    return option or os.environ.get("IMAGEGEN_EXPECTED") or None


def own_requirements() -> dict[str, str]:
    """Component key -> distribution for vlmgrpo's unconditional requirements (outside an image)."""
    try:
        requirements = metadata.requires("vlmgrpo") or []
    except metadata.PackageNotFoundError:
        return {}
    names = [_REQUIREMENT_NAME.match(text).group(1) for text in requirements
             if ";" not in text and _REQUIREMENT_NAME.match(text)]
    return {name.lower().replace("-", "_"): name for name in names}


def cudnn_version() -> tuple[Optional[int], Optional[str]]:
    """(torch.backends.cudnn.version(), why not) -- the library may not load on a host without a GPU driver."""
    try:
        import torch

        version = torch.backends.cudnn.version()
    except Exception as exc:  # a broken CUDA install raises all sorts of errors here
        return None, f"cudnn cannot be queried: {exc}"
    return (version, None) if version else (None, "torch reports no cudnn")


def nccl_version() -> tuple[Optional[tuple], Optional[str]]:
    try:
        import torch

        version = torch.cuda.nccl.version()
    except Exception as exc:
        return None, f"nccl cannot be queried: {exc}"
    if isinstance(version, int):  # old torch returned 2708 for 2.7.8
        version = (version // 1000, version % 1000 // 100, version % 100)
    return tuple(version), None


def dotted(parts) -> Optional[str]:
    return ".".join(str(p) for p in parts) if parts else None


def cudnn_parts(version: int) -> tuple[int, int, int]:
    """cuDNN 9 encodes 9.24.0 as 92400; cuDNN 8 encoded 8.9.2 as 8902."""
    if version >= 10000:
        return version // 10000, version % 10000 // 100, version % 100
    return version // 1000, version % 1000 // 100, version % 100


def torch_versions() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"torch": None, "torch_cuda": None, "cudnn": None, "nccl": None}
    cudnn, _ = cudnn_version()
    nccl, _ = nccl_version()
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": dotted(cudnn_parts(cudnn)) if cudnn else None,
        "nccl": dotted(nccl),
    }


def memory_bytes() -> Optional[int]:
    try:
        with open("/proc/meminfo") as stream:
            for line in stream:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gpus() -> list[dict[str, Any]]:
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        found = []
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            found.append({
                "index": index,
                "name": properties.name,
                "capability": f"{properties.major}.{properties.minor}",
                "memory_bytes": properties.total_memory,
            })
        return found
    except Exception:
        return []


def collect_info() -> dict[str, Any]:
    expected, _ = read_expected(expected_path(None))
    versions = component_versions(expected or {"distributions": own_requirements()})
    runtime = torch_versions()
    for key, value in runtime.items():  # when torch imports, its own view of what it runs with wins
        if runtime["torch"] is not None or key not in versions:
            versions[key] = value
    return {
        "versions": versions,
        "hardware": {
            "cpu_count": os.cpu_count(),
            "memory_bytes": memory_bytes(),
            "gpus": gpus(),
        },
        "environment": environment(),
    }


def environment() -> dict[str, Any]:
    """The uid and where this process's HOME and caches are (vlmgrpo makes them writable for any uid)."""
    names = ("HOME", "USER", "XDG_CACHE_HOME", "HF_HOME", *CACHES)
    return {"uid": os.getuid(), "gid": os.getgid(), **{name: os.environ.get(name) for name in names}}
