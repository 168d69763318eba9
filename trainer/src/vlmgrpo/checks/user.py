"""user.nonroot: the image runs as an unprivileged user."""

from __future__ import annotations

import os

from vlmgrpo.checks import FAIL, PASS, Context, result

NAMES = ("user.nonroot",)
ORDER = 20
NEEDS = ()


def run(context: Context) -> list[dict[str, str]]:
    uid = os.getuid()
    if uid == 0:
        return [result("user.nonroot", FAIL, "running as root (uid 0); the image should run as an unprivileged user")]
    return [result("user.nonroot", PASS, f"uid {uid}")]
