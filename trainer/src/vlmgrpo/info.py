"""`vlmgrpo info`: library versions and hardware, as the image's users and `imagegen test` see them.

Which libraries: in an imagegen image, the components its expected.json names (imagegen's one
table of components); elsewhere, vlmgrpo's own requirements.
"""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from packaging.requirements import Requirement

DEFAULT_EXPECTED = "/etc/imagegen/expected.json"


def installed_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def expected_path(option: Optional[str]) -> str:
    return option or os.environ.get("IMAGEGEN_EXPECTED") or DEFAULT_EXPECTED


def read_expected(path: str) -> tuple[Optional[dict], Optional[str]]:
    """(expected, reason when version checks cannot run)."""
    if not os.path.isfile(path):
        return None, f"no expected-versions file at {path}"
    try:
        expected = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return {}, f"cannot read {path}: {exc}"
    if not isinstance(expected, dict) or not isinstance(expected.get("versions"), dict):
        return {}, f"{path} does not hold imagegen's {{\"versions\": {{...}}, \"distributions\": {{...}}}}"
    return expected, None


def distributions(expected: Optional[dict]) -> dict[str, str]:
    """Component key -> the distribution installed for it."""
    if expected and isinstance(expected.get("distributions"), dict):
        return expected["distributions"]
    own = [Requirement(text) for text in metadata.requires("vlmgrpo") or ()]
    return {r.name.lower().replace("-", "_"): r.name for r in own if not r.marker}


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
    versions = {"python": platform.python_version(), **torch_versions()}
    versions.update({key: installed_version(name) for key, name in distributions(expected).items()
                     if key not in versions})
    versions["vlmgrpo"] = installed_version("vlmgrpo")
    return {
        "versions": versions,
        "hardware": {
            "cpu_count": os.cpu_count(),
            "memory_bytes": memory_bytes(),
            "gpus": gpus(),
        },
    }
