"""What a wheel's file name says about a Linux build: its platforms, its CPython and its C++ ABI.

Pure parsing of literal names, no index: PyPI's torch wheels are `manylinux*` ones
(`torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl`, `...-manylinux_2_28_x86_64.whl`), while the PyTorch
index's older builds carry the bare `linux_x86_64` tag (`torch-2.4.1+cu118-cp311-cp311-linux_x86_64.whl`).
Both are Linux wheels of the machine; the bare tag declares no glibc level.
"""

from __future__ import annotations

import re

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

CXX11_FROM_GLIBC = (2, 28)  # manylinux_2_28 and newer torch wheels use the C++11 ABI
# What a platform tag without a level stands for. PyTorch built its `linux_x86_64` wheels in its manylinux2014
# builders (glibc 2.17, the pre-C++11 ABI), like its manylinux1/manylinux2014 ones; manylinux1 is glibc 2.5.
LEGACY_LEVELS = {"linux": (2, 17), "manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def linux_platforms(filename: str, machine: str = "x86_64") -> set[str]:
    """The Linux platform tags of a wheel for `machine`: manylinux ones and the bare linux_<machine>."""
    return {platform for platform in _platforms(filename)
            if platform.endswith("_" + machine) and (platform.startswith("manylinux") or platform == "linux_" + machine)}


def python_of(filename: str) -> str | None:
    """The CPython minor a wheel is built for, "3.11" for cp311; None for a pure or non-CPython wheel."""
    for tag in _tags(filename):
        match = re.fullmatch(r"cp3(\d+)", tag.interpreter)
        if match:
            return f"3.{match.group(1)}"
    return None


def glibc_level(platform: str) -> tuple[int, int] | None:
    """The glibc a Linux platform tag needs: (2, 28) for manylinux_2_28_x86_64, (2, 17) for linux_x86_64."""
    match = re.match(r"manylinux_(\d+)_(\d+)_", platform)
    if match:
        return int(match.group(1)), int(match.group(2))
    return LEGACY_LEVELS.get(platform.split("_", 1)[0])


def cxx11_abi(filename: str, machine: str = "x86_64") -> bool | None:
    """Whether a torch wheel is built with the C++11 ABI, from its newest Linux platform tag; None: no Linux tag."""
    levels = [level for level in map(glibc_level, linux_platforms(filename, machine)) if level]
    return max(levels) >= CXX11_FROM_GLIBC if levels else None


def _tags(filename: str) -> frozenset:
    try:
        return parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return frozenset()


def _platforms(filename: str) -> set[str]:
    return {tag.platform for tag in _tags(filename)}
