"""`vlmgrpo info` answers with JSON (it imports torch: natively only)."""

import json

from imagegen.stages.checks.context import Context, tail
from imagegen.stages.results import FAIL, PASS, Check

NAME = "command.info"
NAMES, PHASE, NEEDS = (NAME,), "commands", ("native",)


def run(context: Context) -> list[Check]:
    done = context.run(["info"])
    try:
        json.loads(done.stdout)["versions"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [Check(NAME, FAIL, f"exit {done.exit_code}, no JSON: {tail(done.stdout + done.stderr)}")]
    return [Check(NAME, PASS, "prints versions and hardware as JSON")]
