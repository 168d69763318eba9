"""version.<key>: each component the expected file names, at the version it names (imagegen's table decides which).

Versions come from inventory.component_versions (no import of torch); cudnn and nccl, when the file names no wheel
family for them, as torch reports them (a skip when they cannot be queried, e.g. without a GPU driver)."""

from __future__ import annotations

import sys
from typing import Any, Optional

from vlmgrpo.image.info import cudnn_parts, cudnn_version, nccl_version
from vlmgrpo.inventory import component_versions
from vlmgrpo.checks import FAIL, PASS, SKIP, Context, result

NAMES = ("version",)
ORDER = 10
NEEDS = ()
RUNTIME_LIBRARIES = ("cudnn", "nccl")  # read from torch unless a wheel family names their distribution


def same_public_version(installed: str, expected: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(installed).public) == Version(Version(str(expected)).public)
    except InvalidVersion:
        return installed.split("+")[0] == str(expected).split("+")[0]


def first_parts(value: str, count: int) -> tuple[int, ...]:
    return tuple(int(part) for part in str(value).split(".")[:count])


def starts_with_version(installed: str, expected: Any) -> bool:
    """A family's wheel (nvidia-cudnn-cu12 9.1.0.70) against a version of fewer parts (9.1.0)."""
    parts = str(expected).split(".")
    return installed.split(".")[:len(parts)] == parts


def library_version_check(key: str, expected: Any) -> dict[str, str]:
    """cudnn/nccl as torch reports them; unqueryable (e.g. no GPU driver) is a skip, not a failure."""
    name = f"version.{key}"
    if expected is None:
        return result(name, SKIP, f"{key} not expected (null)")
    if key == "cudnn":
        raw, why = cudnn_version()
        actual = cudnn_parts(raw) if raw else None
    else:
        actual, why = nccl_version()
    if actual is None:
        return result(name, SKIP, why or f"{key} cannot be queried")
    ok = tuple(actual[:3]) == first_parts(expected, 3)
    return result(name, PASS if ok else FAIL, f"{key} {'.'.join(map(str, actual))}, expected {expected}")


def version_check(key: str, expected: Any, found: dict[str, Optional[str]], families: dict) -> dict[str, str]:
    name = f"version.{key}"
    if key == "python":
        actual = f"{sys.version_info.major}.{sys.version_info.minor}"
        ok = first_parts(expected, 2) == (sys.version_info.major, sys.version_info.minor)
        return result(name, PASS if ok else FAIL, f"python {actual}, expected {expected}")
    if key in RUNTIME_LIBRARIES and key not in families:
        return library_version_check(key, expected)
    if key not in found:
        return result(name, FAIL, f"the expected file names no distribution for {key}")
    actual = found[key]
    if expected is None:
        if actual is None:
            return result(name, PASS, f"{key} absent, as expected")
        return result(name, FAIL, f"{key} {actual} installed, expected absent")
    if actual is None:
        return result(name, FAIL, f"{key} not installed, expected {expected}")
    ok = starts_with_version(actual, expected) if key in families else same_public_version(actual, expected)
    return result(name, PASS if ok else FAIL, f"{key} {actual}, expected {expected}")


def run(context: Context) -> list[dict[str, str]]:
    expected = context.expected
    if expected is None or context.expected_problem:
        return [result("version", SKIP if expected is None else FAIL, context.expected_problem)]
    found = component_versions(expected)
    families = expected.get("families") or {}
    return [version_check(key, wanted, found, families) for key, wanted in expected["versions"].items()]
