"""NVIDIA driver and CUDA versions, read and ordered as the NVIDIA container toolkit reads them: the one reading of
imagegen (imagegen.core.nvidia_require, which evaluates NVIDIA_REQUIRE_* with it) and of the image (vlmgrpo.image.driver,
which compares the host's driver with the expected file's "driver" entry at start), so that what imagegen promises an
image starts on and what the image refuses at start are the same comparison.

The semantics are libnvidia-container's (src/cli/dsl.c, dsl_compare_version): a version is numbers separated by dots,
compared number by number, missing numbers counting as 0 ("535" == "535.0", "535.104.05" > "535").

Standard library only, Python 3.8: `python -m vlmgrpo.image.driver` imports it before anything else in the image.
"""

from __future__ import annotations

import functools
import re
from typing import Tuple

# ASCII digits (\d takes any script's: "٥٥٠.٥٤" read as 550.54), at most 9 to a part and 10 parts (a driver version
# of 5,000 digits is past int()'s limit of 4,300): dsl.c reads none of those either.
VERSION = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9}){0,9}")


class UnreadableVersion(ValueError):
    """A driver or CUDA version that is not numbers and dots: the toolkit refuses to read it."""


@functools.lru_cache(maxsize=4096)  # imagegen validate asks thousands of (driver, brand) pairs about a few dozen
def parts(version: str) -> Tuple[int, ...]:
    """A driver or CUDA version as numbers: "550.54.15" -> (550, 54, 15); UnreadableVersion where dsl.c refuses it."""
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        raise UnreadableVersion(f"{version!r} is not a version of numbers and dots")
    return tuple(int(part) for part in version.split("."))


def is_version(value: object) -> bool:
    """Whether `value` is a version parts() reads."""
    return isinstance(value, str) and bool(VERSION.fullmatch(value))


def compare(left: str, right: str) -> int:
    """-1, 0 or 1 as dsl_compare_version orders two versions: number by number, a missing number counting as 0."""
    a, b = parts(left), parts(right)
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def branch(driver: str) -> int:
    """A driver's branch: its first number (R550 for 550.54.15)."""
    return parts(driver)[0]
