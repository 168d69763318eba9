"""A reward for the monitoring tests only: 0 for every completion, but in the step after each step listed in
VLMGRPO_TEST_HOLD_AFTER (comma-separated) it waits until the matching file of VLMGRPO_TEST_RELEASE (os.pathsep-
separated, one per step) exists, at most 120 s: a stalled step, as a hung collective or a stuck data loader makes,
that lasts exactly as long as the test needs, however loaded the machine is."""

import os
import time
from pathlib import Path


def held(prompts, completions, trainer_state=None, **kwargs):
    after, release = os.environ.get("VLMGRPO_TEST_HOLD_AFTER"), os.environ.get("VLMGRPO_TEST_RELEASE")
    if after is not None and release and trainer_state is not None:
        holds = dict(zip((int(step) for step in after.split(",")), release.split(os.pathsep)))
        if trainer_state.global_step in holds:
            deadline = time.monotonic() + 120
            while not Path(holds[trainer_state.global_step]).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
    return [0.0] * len(completions)
