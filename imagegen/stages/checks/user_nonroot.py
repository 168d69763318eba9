"""The image runs as a user other than root, by number (Kubernetes' runAsNonRoot checks the number)."""

from imagegen.stages.checks.context import Context
from imagegen.stages.results import FAIL, PASS, Check

NAME = "user.nonroot"
NAMES, PHASE, NEEDS = (NAME,), "image", ()


def check_user(user: str) -> Check:
    if user.split(":")[0] in ("", "0", "root"):
        return Check(NAME, FAIL, f"the image's USER is {user or 'unset'} (root)")
    return Check(NAME, PASS, f"USER {user}")


def run(context: Context) -> list[Check]:
    return [check_user(context.facts["user"])]
