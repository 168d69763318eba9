"""version.<key>: each component the expected file names, at the version it names (imagegen's table decides which), as
the inventory judges it (inventory.version_checks: the one verdict, which `imagegen test` reports from the inventory it
runs in the image, also under emulation, and so asks selftest for none: --skip-versions)."""

from __future__ import annotations

from imagegen_contract.inventory import component_versions, version_checks
from vlmgrpo.image.checks import FAIL, Context, result

NAMES = ("version",)
PHASE = "versions"
# without the file the runner skips, saying why (an unusable one, {}, fails here); "versions": not --skip-versions
NEEDS = ("expected", "versions")


def run(context: Context) -> list[dict[str, str]]:
    if context.expected_problem:
        return [result("version", FAIL, context.expected_problem)]
    return version_checks(context.expected, component_versions(context.expected))
