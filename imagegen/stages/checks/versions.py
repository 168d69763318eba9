"""version.<key>: each component's version inside the image against the version it was built to hold (its
expected.json), as the inventory judged it in the image (imagegen_contract.inventory.version_checks, by the one rule
version_matches): the verdict is made once, inside, also under emulation, and reported here; the image's selftest is
asked for none of it (--skip-versions). cuDNN and NCCL that torch alone can tell are its selftest.torch.<key>."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import Check

NAME = "version"  # one check per component key: version.<key>
NAMES, PHASE, NEEDS = (NAME,), "inside", ("inventory", "expected")


def run(context: Context) -> list[Check]:
    return context.with_inventory(NAME, lambda found: [Check(c["name"], c["status"], c["detail"])
                                                       for c in found["version_checks"] or ()])
