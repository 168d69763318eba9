"""Errors a user can fix: a command line prints one as one line, without a traceback, and exits with its exit_code.
imagegen's and the trainer's errors are kinds of this one, so that either side's command line reports what the
contract's own code raises (a bad expected file, an unreadable YAML file) as it reports its own."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input or environment, reported without a traceback."""

    exit_code = 1
