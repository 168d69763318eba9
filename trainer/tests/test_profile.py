"""`--profile-steps A:B`: the steps recorded with torch.profiler as a trace under OUTPUT/profile/."""

import json

import pytest

from conftest import in_process, train_args
from vlmgrpo.config.sections import parse_profile_steps


def test_steps_are_a_range_from_1():
    assert parse_profile_steps("2:3") == (2, 3) and parse_profile_steps(" 5:5 ") == (5, 5)
    assert parse_profile_steps("0:3") is None and parse_profile_steps("4:2") is None and parse_profile_steps("3") is None


def test_a_bad_range_is_one_error_before_anything_loads(tiny, tmp_path):
    result = in_process(*train_args(tiny, tmp_path / "out", "--profile-steps", "3-4", "--dry-run"))
    assert result.returncode == 2 and "key 'profile_steps': '3-4' is not A:B" in result.stderr


@pytest.mark.slow
def test_the_profiled_steps_are_a_trace_beside_the_run(tiny, tmp_path):
    output = tmp_path / "out"
    result = in_process(*train_args(tiny, output, "--max-steps", "3", "--save-steps", "100", "--profile-steps", "2:3"),
                        check=True)
    trace = output / "profile" / "rank0-steps2-3.pt.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any("aten::" in event.get("name", "") for event in events)  # torch ops of the profiled steps
    assert "step 3/3" in result.stdout and not list((output / "profile").glob("*.partial"))
