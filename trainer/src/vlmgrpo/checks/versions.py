"""version.<key>: each component the expected file names, at the version it names (imagegen's table decides which), by
the one rule imagegen's host check reads too (inventory.version_matches).

Versions come from inventory.component_versions (no import of torch); cudnn and nccl, when the file names no wheel
family for them, as torch reports them (a skip when they cannot be queried, e.g. without a GPU driver)."""

from __future__ import annotations

import sys
from typing import Any, Optional

from vlmgrpo.image.info import cudnn_parts, cudnn_version, nccl_version
from vlmgrpo.inventory import LIBRARY_KEYS, component_versions, version_matches
from vlmgrpo.checks import FAIL, PASS, SKIP, Context, result

NAMES = ("version",)
PHASE = "versions"
NEEDS = ("expected",)  # without the file the runner skips, saying why; an unusable one ({}) fails here


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
    inside = ".".join(map(str, actual))
    ok = version_matches(key, inside, expected)
    return result(name, PASS if ok else FAIL, f"{key} {inside}, expected {expected}")


def version_check(key: str, expected: Any, found: dict[str, Optional[str]], families: dict) -> dict[str, str]:
    name = f"version.{key}"
    if key == "python":
        actual = "%d.%d.%d" % sys.version_info[:3]
        ok = version_matches(key, actual, expected)
        return result(name, PASS if ok else FAIL, f"python {actual}, expected {expected}")
    if key in LIBRARY_KEYS and key not in families:  # read from torch unless a wheel family names their distribution
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
    ok = version_matches(key, actual, expected, families)
    return result(name, PASS if ok else FAIL, f"{key} {actual}, expected {expected}")


def run(context: Context) -> list[dict[str, str]]:
    expected = context.expected
    if context.expected_problem:
        return [result("version", FAIL, context.expected_problem)]
    found = component_versions(expected)
    families = expected.get("families") or {}
    return [version_check(key, wanted, found, families) for key, wanted in expected["versions"].items()]
