"""`imagegen facts update`: releases written into a copy of the tests' matrix as PyPI serves them, equal to the
facts the real matrix states and to what `facts check` reads back; and its user errors."""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.helpers import FIXTURE, MATRIX_PATH
from tests.test_cli import imagegen, on


@pytest.fixture
def matrix_copy(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "repo")
    return tmp_path / "repo" / "matrix.yaml"


@pytest.mark.network
def test_a_new_torch_and_a_new_transformers_get_the_index_s_facts(matrix_copy):
    before = matrix_copy.read_text()
    assert '"2.15.0"' not in before and '"5.23.0"' not in before
    result = imagegen("facts", "update", "torch==2.15.0", "transformers==5.23.0", *on(matrix_copy))
    assert result.returncode == 0, result.stderr
    assert "torch 2.15.0: PyPI's CUDA 13.2 build, cuDNN 9.26.0.51" in result.stdout
    written = yaml.safe_load(matrix_copy.read_text())
    real = yaml.safe_load(MATRIX_PATH.read_text())["torch"]["2.15.0"]
    torch = written["torch"]["2.15.0"]
    assert {k: torch[k] for k in real if k != "source"} == {k: real[k] for k in real if k != "source"}
    assert torch["source"] == "https://pypi.org/project/torch/2.15.0/"
    assert written["packages"]["transformers"]["5.23.0"] == {"python": ">=3.11.0", "torch": ">=2.6"}
    assert matrix_copy.read_text().startswith(before.split("\ntorch:\n")[0])  # the comments above are kept
    again = imagegen("facts", "update", "torch==2.15.0", *on(matrix_copy))
    assert again.returncode == 0 and "is in the matrix already" in again.stdout
    check = imagegen("facts", "check", *on(matrix_copy))
    errors = [line for line in check.stderr.splitlines() if line.startswith("error:")]
    assert not [line for line in errors if "2.15.0" in line or "5.23.0" in line], errors


@pytest.mark.parametrize("spec, says", [
    ("torch>=2.15", "name one release, NAME==VERSION"),
    ("torch==", "is not NAME==VERSION"),
    ("numpy==2.0.0", "numpy is neither torch nor a package of the matrix's components"),
    ("cuda-toolkit==13.2.2", "a CUDA line's base tags and driver are not on PyPI"),
])
def test_what_it_cannot_write_is_one_line_and_the_matrix_is_untouched(matrix_copy, spec, says):
    before = matrix_copy.read_text()
    result = imagegen("facts", "update", spec, *on(matrix_copy))
    assert result.returncode == 1 and says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert matrix_copy.read_text() == before
