"""`vlmgrpo info` answers with JSON (it imports torch: natively only)."""

import json

from imagegen.stages.checks.context import Context, tail
from imagegen.stages.results import FAIL, PASS, Check

NAME, ORDER = "command.info", 30


def run(context: Context) -> list[Check]:
    skip = context.native_only(NAME)
    if skip:
        return [skip]
    done = context.run(["info"])
    try:
        json.loads(done.stdout)["versions"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return [Check(NAME, FAIL, f"exit {done.exit_code}, no JSON: {tail(done.stdout + done.stderr)}")]
    return [Check(NAME, PASS, "prints versions and hardware as JSON")]
