"""`train --help` answers: the entrypoint finds the trainer, under emulation too."""

from imagegen.stages.checks.context import Context, tail
from imagegen.stages.results import FAIL, PASS, Check

NAME = "command.train_help"
NAMES, PHASE, NEEDS = (NAME,), "commands", ()
ARGS = ["train", "--help"]


def run(context: Context) -> list[Check]:
    done = context.run(ARGS)
    if done.exit_code == 0:
        return [Check(NAME, PASS, f"`{' '.join(ARGS)}` exits 0")]
    return [Check(NAME, FAIL, f"`{' '.join(ARGS)}` exits {done.exit_code}: {tail(done.stderr or done.stdout)}")]
