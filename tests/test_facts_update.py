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


@pytest.fixture
def fake_index(monkeypatch):
    """PyPI as the test says: each release of any project has one wheel whose Requires-Python is
    `requires_python` and which requires torch>=2.0; `during_fetch` runs while a release's files are read."""
    from imagegen.locking import index

    served = {"requires_python": ">=3.9", "during_fetch": lambda: None}

    def release_files(index_url, project, version):
        served["during_fetch"]()
        name = f"{project.replace('-', '_')}-{version}-py3-none-any.whl"
        return [index.IndexFile(name, f"{index_url}/{name}", "0" * 64, served["requires_python"], True)]

    monkeypatch.setattr(index, "release_files", release_files)
    monkeypatch.setattr(index, "wheel_metadata", lambda wheel: {"Requires-Dist": ["torch>=2.0"]})
    return served


def packages_of(matrix) -> dict:
    return yaml.safe_load(matrix.read_text())["packages"]


def test_two_updates_at_once_both_land(matrix_copy, fake_index):
    """Each reads the matrix, reads the index (a while), writes: without the lock, the second wrote over the first."""
    import threading
    import time

    from imagegen.facts import update as facts_update

    fake_index["during_fetch"] = lambda: time.sleep(0.3)
    said, threads = [], [threading.Thread(target=lambda spec=spec: said.extend(facts_update.update(matrix_copy, (spec,))))
                         for spec in ("peft==9.9.9", "trl==9.9.9")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(said) == ["peft 9.9.9: python >=3.9, torch >=2.0", "trl 9.9.9: python >=3.9, torch >=2.0"]
    packages = packages_of(matrix_copy)
    assert packages["peft"]["9.9.9"] == packages["trl"]["9.9.9"] == {"python": ">=3.9", "torch": ">=2.0"}


def refused(matrix, error: str, exit_code: int = 1) -> bytes:
    """`facts update peft==9.9.9` says `error:` this, one line; what the matrix holds afterwards."""
    result = imagegen("facts", "update", "peft==9.9.9", *on(matrix))
    assert (result.returncode, result.stderr) == (exit_code, f"error: {error}\n")
    return matrix.read_bytes()


def test_an_edit_made_while_the_index_is_read_is_kept_and_the_update_refused(matrix_copy, fake_index):
    edited = matrix_copy.read_text() + "# a person's note, saved while the index was read\n"
    fake_index["during_fetch"] = lambda: matrix_copy.write_text(edited)
    assert refused(matrix_copy, f"{matrix_copy} changed while the index was read; nothing written, the change kept: "
                                "run `imagegen facts update peft==9.9.9` again") == edited.encode()


def test_a_release_is_known_by_its_version_not_its_spelling(matrix_copy, fake_index):
    before = matrix_copy.read_text()
    result = imagegen("facts", "update", "peft==0.21.2.0", *on(matrix_copy))
    assert result.returncode == 0 and result.stdout == (
        f"{matrix_copy}: peft 0.21.2.0 is in the matrix already (as 0.21.2): `imagegen facts check` compares it\n")
    assert matrix_copy.read_text() == before


@pytest.mark.parametrize("requires_python", [">=3.9\nimages: []", ">=3.9, <4\"", "three point nine"])
def test_index_text_that_is_not_a_specifier_is_refused(matrix_copy, fake_index, requires_python):
    before = matrix_copy.read_bytes()
    fake_index["requires_python"] = requires_python
    assert refused(matrix_copy, f"peft 9.9.9: the index's Requires-Python {requires_python!r} is not a version "
                                "specifier (PEP 440) on one line; nothing written") == before


def test_a_matrix_that_is_not_utf_8_is_one_line(matrix_copy, fake_index):
    matrix_copy.write_bytes(matrix_copy.read_bytes() + b"# caf\xe9\n")
    line = matrix_copy.read_bytes().count(b"\n")
    refused(matrix_copy, f"{matrix_copy}:{line}: (encoding): not UTF-8: byte 0xe9 at column 6; save the file as "
                         "UTF-8 [yaml]", exit_code=2)
