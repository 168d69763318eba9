"""User-facing errors: one line, exit code 2, no traceback."""

from imagegen_contract import errors


class UserError(errors.UserError):
    """A problem the user can fix (config, data, launch); the CLI prints it and exits 2."""

    exit_code = 2


class ConfigError(UserError):
    pass


class DataError(UserError):
    """Carries every problem found, so a user fixes the dataset in one pass; one problem is one line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(problems[0] if len(problems) == 1 else f"{len(problems)} data errors:\n" + "\n".join(problems))


class LaunchError(UserError):
    pass
