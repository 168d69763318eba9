"""Needs that cannot be misspelled (issue 54, item 4): every check module of both sides names only needs its side
judges or component keys of the matrix, and a copy of any module with a misspelt need fails, naming the need and the
module, instead of skipping for good ("skip: no flash_atn in this image")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

import pytest

from imagegen.engine.containers import ContainerError
from imagegen.stages import checks as host_checks
from imagegen.stages.results import Check
from imagegen.matrix import model as matrix_model
from vlmgrpo.image import checks as image_checks

from tests.helpers import REPO, check_runner

RUNNER = check_runner()
MATRIX_COMPONENTS = matrix_model.read(REPO / "matrix.yaml").components.keys
IMAGE_MODULES = image_checks.discover()
HOST_MODULES = host_checks.discovered(RUNNER)


def test_the_image_side_s_component_needs_are_components_of_the_matrix():
    assert set(image_checks.COMPONENT_NEEDS) <= set(MATRIX_COMPONENTS)


@pytest.mark.parametrize("module", IMAGE_MODULES, ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_every_image_check_names_only_needs_its_side_judges(module):
    assert RUNNER.unknown_need(module, image_checks.NEEDS_JUDGED) is None


@pytest.mark.parametrize("module", HOST_MODULES, ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_every_host_check_names_only_needs_its_side_judges(module):
    assert RUNNER.unknown_need(module, host_checks.NEEDS_JUDGED + MATRIX_COMPONENTS) is None


def misspelt(module: types.ModuleType) -> types.ModuleType:
    """A copy of the module whose first need (or a GPU, where it has none) is misspelt."""
    copy = types.ModuleType(module.__name__ + "_copy")
    copy.__dict__.update({key: value for key, value in vars(module).items() if not key.startswith("__")})
    copy.NEEDS = (((module.NEEDS or ("gpu",))[0] + "s"),) + tuple(module.NEEDS[1:])
    return copy


@pytest.mark.parametrize("module", IMAGE_MODULES, ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_a_misspelt_need_in_a_copy_of_any_image_check_fails_naming_it(module):
    copy = misspelt(module)
    results = image_checks.run_checks(image_checks.Context(expected=None), [copy])
    assert [r["name"] for r in results] == list(module.NAMES) and {r["status"] for r in results} == {"fail"}
    assert f"{copy.__name__} needs {copy.NEEDS[0]!r}, which is neither a need this side judges" in \
        results[0]["detail"]


@pytest.mark.parametrize("module", HOST_MODULES, ids=lambda module: module.__name__.rsplit(".", 1)[1])
def test_a_misspelt_need_in_a_copy_of_any_host_check_fails_naming_it(module):
    copy = misspelt(module)
    results = RUNNER.run_checks([copy], None, lambda need: None, Check, ContainerError,
                                known=host_checks.NEEDS_JUDGED + MATRIX_COMPONENTS)
    assert [r.name for r in results] == list(module.NAMES) and {r.status for r in results} == {"fail"}
    assert f"{copy.__name__} needs {copy.NEEDS[0]!r}" in results[0].detail


@pytest.mark.slow
def test_vlmgrpo_selftest_fails_on_a_module_with_a_misspelt_need(tmp_path):
    """The real command on a copy of the trainer's package holding one more check module, flash_attn_4's with
    NEEDS ("flash_atn",): its names fail with the one line, exit 1; the others run as before."""
    source = REPO / "trainer" / "src" / "vlmgrpo"
    shutil.copytree(source, tmp_path / "vlmgrpo", ignore=shutil.ignore_patterns("__pycache__"))
    module = (source / "image" / "checks" / "flash_attn_4.py").read_text()
    assert 'NEEDS = ("flash_attn_4",)' in module
    (tmp_path / "vlmgrpo" / "image" / "checks" / "flash_attn_4_copy.py").write_text(
        module.replace('NEEDS = ("flash_attn_4",)', 'NEEDS = ("flash_atn",)'))
    done = subprocess.run([sys.executable, "-m", "vlmgrpo", "selftest", "--skip-train"], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "vlmgrpo.image.checks.flash_attn_4_copy needs 'flash_atn', which is neither a need this side judges" in \
        done.stdout + done.stderr, done.stdout[-3000:]
