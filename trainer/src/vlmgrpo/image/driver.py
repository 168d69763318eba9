"""`python -m vlmgrpo.image.driver`: refuse to start on a GPU host whose NVIDIA driver is older than
the image needs, in one line, before anything loads CUDA (which would fail obscurely later).

What the image needs is its expected file's "driver" entry, which imagegen writes from the same requirement as the
image's NVIDIA_REQUIRE_CUDA: the container toolkit checks that variable, but Apptainer and other runtimes without the
toolkit do not, so this check says it for them.

`vlmgrpo train`, `sft` and `selftest` run it first; it compares only when the driver's version file is visible,
i.e. when a GPU was handed in.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Optional, Tuple

# Versions compare as imagegen compares them when it says which drivers an image starts on; the entry's format and
# shape are the expected file's, one definition for both sides.
from imagegen_contract.driver import UnreadableVersion, branch, compare, is_version
from imagegen_contract.expected import driver_entry_problems

VERSION_FILE = "/proc/driver/nvidia/version"
_KERNEL_MODULE = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]{1,9}(?:\.[0-9]{1,9})+)")


def found_driver(text: str) -> Optional[str]:
    """The driver version in /proc/driver/nvidia/version's text, e.g. 550.54.15."""
    match = _KERNEL_MODULE.search(text)
    return match.group(1) if match else None


def requirement(expected: dict) -> Tuple[Optional[str], Tuple[str, ...]]:
    """(the oldest driver the image starts on with any GPU, the older branches it starts on with a datacenter GPU) from
    the expected file's "driver" entry (REQUIREMENT_FORMAT, imagegen.matrix.drivers), or the bare "min_driver" of
    images made before it; (None, ()) from an entry of a format or shape this trainer does not know (nothing to compare
    with)."""
    entry = expected.get("driver")
    if isinstance(entry, dict):
        if driver_entry_problems(entry):
            return None, ()
        return entry["min_driver"], tuple(entry["datacenter_branches"])
    needed = expected.get("min_driver")
    return (needed if is_version(needed) else None), ()


def problem(needed: Optional[str], found: Optional[str], datacenter_branches: Tuple[str, ...] = ()) -> Optional[str]:
    """The one line to print when `found` is older than `needed` and not of a branch the image starts on with a
    datacenter GPU, else None. On such a branch the image's CUDA forward-compatibility package (nvidia/cuda's
    cuda-compat) runs it, and the container toolkit has already refused any other GPU (NVIDIA_REQUIRE_CUDA's brand
    clauses), so there is nothing to add here."""
    try:
        if not needed or not found or compare(found, needed) >= 0 or str(branch(found)) in datacenter_branches:
            return None
    except UnreadableVersion:
        return None  # nothing to compare with
    also = (f" (on a datacenter GPU also R{', R'.join(datacenter_branches)}, through the image's CUDA "
            "forward-compatibility package)") if datacenter_branches else ""
    return (f"error: this image needs NVIDIA driver {needed} or newer{also}; the host has {found}. "
            "Update the host's driver, or use an image built for an older CUDA")


def main(version_file: str = VERSION_FILE) -> int:
    expected_file = os.environ.get("IMAGEGEN_EXPECTED")  # the image sets it; imagegen owns where the file lies
    if not expected_file:
        return 0  # no minimum to compare with
    try:
        with open(version_file) as stream:
            found = found_driver(stream.read())
        with open(expected_file) as stream:
            needed, branches = requirement(json.load(stream))
    except (OSError, ValueError, AttributeError):
        return 0  # nothing to compare: CUDA itself will say what is wrong, if anything is
    line = problem(needed, found, branches)
    if line:
        print(line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
