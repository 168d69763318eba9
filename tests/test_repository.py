"""imagegen works on the repository it runs in (the nearest folder from the current directory upwards with a
matrix.yaml, or $IMAGEGEN_REPO), never on the checkout it was installed from: two clones, each read and written alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from imagegen.workspace import repository_root

from tests.conftest import imagegen
from tests.helpers import REPO


def clone(where: Path, drop: tuple[str, ...] = ()) -> Path:
    """A copy of this repository's inputs (matrix, locks, templates, trainer and contract sources), less the images
    named."""
    where.mkdir(parents=True)
    data = yaml.safe_load((REPO / "matrix.yaml").read_text())
    data["images"] = [image for image in data["images"] if image["name"] not in drop]
    (where / "matrix.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copytree(REPO / "locks", where / "locks")
    for name in drop:
        (where / "locks" / f"{name}.json").unlink(missing_ok=True)
    shutil.copytree(REPO / "templates", where / "templates")
    for source in ("trainer", "contract"):
        shutil.copytree(REPO / source, where / source, ignore=shutil.ignore_patterns("tests", "*.egg-info",
                                                                                     "__pycache__"))
    return where


def test_the_repository_is_found_from_the_current_directory_upwards_or_named(tmp_path):
    first = clone(tmp_path / "first")
    (first / "deep" / "er").mkdir(parents=True)
    assert repository_root(first / "deep" / "er", environ={}) == first.resolve()
    assert repository_root(tmp_path, environ={}) == tmp_path.resolve()  # none upwards: here, which has no matrix
    assert repository_root(tmp_path, environ={"IMAGEGEN_REPO": str(first)}) == first


@pytest.mark.slow
def test_two_clones_are_each_read_alone_whatever_checkout_imagegen_was_installed_from(tmp_path):
    first, second = clone(tmp_path / "first"), clone(tmp_path / "second", drop=("cpu",))
    listed = imagegen("matrix", "--format", "json", cwd=first)
    assert listed.returncode == 0, listed.stderr
    assert "cpu" in {row["name"] for row in yaml.safe_load(listed.stdout)}
    (second / "sub").mkdir()
    listed = imagegen("matrix", "--format", "json", cwd=second / "sub")
    assert listed.returncode == 0, listed.stderr
    assert "cpu" not in {row["name"] for row in yaml.safe_load(listed.stdout)}
    assert f"imagegen: the repository at {second.resolve()}" in listed.stderr  # not the current folder: said
    rendered = imagegen("render", "--image", "debian12-cu130-torch2.14", "--out", str(tmp_path / "out"), cwd=second)
    assert rendered.returncode == 0 and "the repository at" not in rendered.stderr, rendered.stderr
    named = imagegen("matrix", "--format", "json", cwd=tmp_path, env={"IMAGEGEN_REPO": str(first)})
    assert "cpu" in {row["name"] for row in yaml.safe_load(named.stdout)}


def test_a_folder_without_a_matrix_is_one_line_not_this_checkouts_matrix(tmp_path):
    done = imagegen("validate", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "matrix.yaml" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
