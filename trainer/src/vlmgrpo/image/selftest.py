"""`vlmgrpo selftest`: the in-image checks (the modules of vlmgrpo.image.checks), as JSON that `imagegen test` reads.

Output contract: {"checks": [{"name", "status": pass|fail|skip, "detail"}], "passed", "failed", "skipped"}.
Runs outside Docker too: every optional library may be missing, and each check reports that instead of crashing.
"""

from __future__ import annotations

from typing import Optional

from imagegen_contract.expected import read as read_expected
from vlmgrpo.image.checks import FAIL, PASS, SKIP, Context, run_checks
from vlmgrpo.image.info import expected_path


def run_selftest(expected_option: Optional[str], require_gpu: bool = False, skip_train: bool = False,
                 skip_versions: bool = False) -> dict:
    expected, problem = read_expected(expected_path(expected_option))
    checks = run_checks(Context(expected, problem, require_gpu=require_gpu, skip_train=skip_train,
                                skip_versions=skip_versions))
    counts = {status: sum(1 for c in checks if c["status"] == status) for status in (PASS, FAIL, SKIP)}
    return {"checks": checks, "passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP]}
