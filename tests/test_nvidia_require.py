"""imagegen/core/nvidia_require.py: NVIDIA_REQUIRE_* variables read as the NVIDIA container toolkit reads them
(libnvidia-container's src/cli/dsl.c), a host's driver given with the CUDA its branch supports."""

from __future__ import annotations

import pytest

from imagegen.core import nvidia_require
from imagegen.core.nvidia_require import RequirementError, admits

BRANCHES = {"470": "11.4", "525": "12.0", "535": "12.2", "550": "12.4", "565": "12.7", "570": "12.8", "580": "13.0",
            "590": "13.1", "595": "13.2"}


@pytest.mark.parametrize("variable, driver, brand, expected", [
    ("cuda>=12.8", "570.86.10", "geforce", True),
    ("cuda>=12.8", "565.57.01", "tesla", False),  # R565 supports 12.7
    ("cuda>=12.8 brand=tesla,driver>=535,driver<536", "535.288.01", "tesla", True),  # space: OR; comma: AND
    ("cuda>=12.8 brand=tesla,driver>=535,driver<536", "535.288.01", "geforce", False),
    ("cuda>=12.8 brand=tesla,driver>=535,driver<536", "536.0", "tesla", False),
    ("cuda>=12.8 brand=Tesla,driver>=535,driver<536", "535.54.03", "TESLA", True),  # brands compare in any case
    ("cuda>=12.8 brand=tesla,driver>=535,driver<536", "535.54.03", None, True),  # no GPU visible: any brand holds
    ("cuda>=12.8 driver>=525.60.13", "525.60.13", "geforce", True),
    ("cuda>=12.8 driver>=525.60.13", "525.60.11", "geforce", False),  # 60.11 < 60.13, number by number
    ("driver>=535", "535", "geforce", True),  # "535" == "535.0": a missing number counts as 0
    ("cuda>=13.2", "610.43.02", "geforce", True),  # a branch newer than the facts list: at least R595's 13.2
    ("cuda>=11.0", "418.87.01", "tesla", False),  # older than every listed branch: no CUDA the matrix knows
    ("", "418.87.01", "tesla", True),
])
def test_the_evaluator_reads_a_variable_as_the_toolkit_does(variable, driver, brand, expected):
    assert admits([variable], driver, brand, BRANCHES) is expected


def test_several_variables_must_all_hold_and_a_bad_one_is_an_error():
    assert admits(["cuda>=12.2", "driver>=550"], "550.54.15", "tesla", BRANCHES)
    assert not admits(["cuda>=12.2", "driver>=560"], "550.54.15", "tesla", BRANCHES)  # each NVIDIA_REQUIRE_*: AND
    for bad in ("cuda=>12.8", "jetpack>=6", "brand>tesla", "cuda>=twelve"):
        with pytest.raises(RequirementError):
            admits([bad], "550.54.15", "tesla", BRANCHES)
    assert nvidia_require.driver_cuda("550.54.15", BRANCHES) == "12.4"
    assert nvidia_require.compare("535.104.05", "535") == 1 and nvidia_require.compare("12.10", "12.9") == 1
