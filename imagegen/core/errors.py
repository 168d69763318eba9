"""Errors a user can fix. The CLI prints them as one line each and exits non-zero."""

from __future__ import annotations

from dataclasses import dataclass

# imagegen's own errors are the contract's, which its command line reports as one line (exit 1)
from imagegen_contract.errors import UserError


@dataclass(frozen=True)
class Problem:
    """One broken rule at one place of the matrix file."""

    file: str
    line: int
    key: str
    message: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.key}: {self.message} [{self.rule}]"


class UsageError(UserError):
    """A command line that cannot mean anything (a value of the wrong form): exit 2, as click's own usage errors."""

    exit_code = 2


class MatrixError(UserError):
    """The matrix file is invalid; carries every problem found."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
