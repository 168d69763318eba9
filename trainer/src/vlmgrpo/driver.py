"""`python -m vlmgrpo.driver`: refuse to start on a GPU host whose NVIDIA driver is older than
the image needs, in one line, before anything loads CUDA (which would fail obscurely later).

`vlmgrpo train`, `sft` and `selftest` run it first; it compares only when the driver's version file is visible,
i.e. when a GPU was handed in.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Optional

VERSION_FILE = "/proc/driver/nvidia/version"
_KERNEL_MODULE = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def found_driver(text: str) -> Optional[str]:
    """The driver version in /proc/driver/nvidia/version's text, e.g. 550.54.15."""
    match = _KERNEL_MODULE.search(text)
    return match.group(1) if match else None


def _parts(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def problem(needed: Optional[str], found: Optional[str]) -> Optional[str]:
    """The one line to print when `found` is older than `needed`, else None."""
    if not needed or not found or _parts(found) >= _parts(needed):
        return None
    return (f"error: this image needs NVIDIA driver {needed} or newer; the host has {found}. "
            "Update the host's driver, or use an image built for an older CUDA")


def main(version_file: str = VERSION_FILE) -> int:
    expected_file = os.environ.get("IMAGEGEN_EXPECTED")  # the image sets it; imagegen owns where the file lies
    if not expected_file:
        return 0  # no minimum to compare with
    try:
        with open(version_file) as stream:
            found = found_driver(stream.read())
        with open(expected_file) as stream:
            needed = json.load(stream).get("min_driver")
    except (OSError, ValueError):
        return 0  # nothing to compare: CUDA itself will say what is wrong, if anything is
    line = problem(needed, found)
    if line:
        print(line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
