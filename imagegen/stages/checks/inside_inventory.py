"""The image can say what it holds: the inventory program runs in it (with the standard library only)."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "inside.inventory"
NAMES, PHASE, NEEDS = (NAME,), "inventory", ()


def run(context: Context) -> list[Check]:
    found = context.inventory()
    if found is None:
        return [Check(NAME, FAIL, context.inventory_error)]
    return [Check(NAME, PASS, f"versions from the installed distributions' metadata: {len(found['distributions'])} "
                              f"distributions, {len(found['os_packages'])} OS packages")]
