"""Shared test helpers: the tests' own matrix (tests/fixture) as data, edited per test and parsed back, and
the workspaces made of it.

Tests build on the fixture, a frozen copy of the real matrix with its locks and a trainer pyproject.toml
of its own, so that adding an image or a trainer dependency to the real ones changes no test. The tests
that read the real matrix.yaml say so (test_real_matrix.py, test_real_images.py, the image builds).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

from imagegen.core.errors import MatrixError
from imagegen.matrix import model as matrix_module
from imagegen.matrix import plan, rules
from imagegen.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
MATRIX_PATH = REPO / "matrix.yaml"  # the real one
FIXTURE = Path(__file__).resolve().parent / "fixture"
FIXTURE_MATRIX = FIXTURE / "matrix.yaml"
FIXTURE_TRAINER = FIXTURE / "trainer"

def check_runner():
    """The check runner `imagegen test` runs the host's checks by: the contract's."""
    from imagegen.stages import inventory

    return inventory.runner()


# The real matrix's jupyterlab row names the trainer's `lab` extra, which a trainer must have to plan it.
TRAINER = plan.Trainer("0.1.0", extras={"lab": ()})


def fixture_workspace(**kwargs) -> Workspace:
    return Workspace(FIXTURE_MATRIX, trainer=FIXTURE_TRAINER, **kwargs)


def fixture_data() -> dict:
    return yaml.safe_load(FIXTURE_MATRIX.read_text())


def image_named(data: dict, name: str) -> dict:
    return next(image for image in data["images"] if image["name"] == name)


def problems_of(data: dict) -> list:
    """The problems a matrix made of `data` has; [] when it resolves."""
    text = yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    try:
        plan.resolve(matrix_module.parse(text, "matrix.yaml"), TRAINER)
    except MatrixError as error:
        return error.problems
    return []


def parsed(data: dict):
    return matrix_module.parse(yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False),
                               "matrix.yaml")


def planned_from(data: dict) -> list:
    """Every planned image x platform of a matrix made of `data`."""
    return plan.resolve(parsed(data), TRAINER)


def warnings_of(data: dict) -> list:
    """What validate warns about in a matrix made of `data`."""
    return rules.warnings(parsed(data))


def rules_broken(data: dict) -> set[str]:
    return {problem.rule for problem in problems_of(data)}


def edited(edit) -> dict:
    data = copy.deepcopy(fixture_data())
    edit(data)
    return data


@functools.lru_cache(maxsize=1)
def loaded():
    """The fixture's plan: every planned image, the locked ones with their tags and labels. Loaded once: it is plain
    data, which no test changes in place (they make changed copies with dataclasses.replace)."""
    return fixture_workspace().load()


def planned():
    return loaded().images


def locked_images():
    return list(loaded().locked.values())


def planned_named(name: str):
    return next(p for p in planned() if p.name == name)


def locked_named(name: str, platform: str = "linux/amd64"):
    return next(i for i in locked_images() if i.name == name and i.platform == platform)


def locked_matrix(directory: Path, edit=None, source: Path = FIXTURE_MATRIX) -> Path:
    """A matrix (the fixture's by default) without the images it has no lock for, beside a copy of its locks,
    after an optional edit of its data; returns the matrix's path. Its workspace takes the trainer the locks
    were made for: FIXTURE_TRAINER for the fixture, the real trainer for the real matrix."""
    data = yaml.safe_load(source.read_text())
    locks = source.parent / "locks"
    data["images"] = [i for i in data["images"] if (locks / f"{i['name']}.json").is_file()]
    if edit:
        edit(data)
    (directory / "locks").mkdir(parents=True, exist_ok=True)
    for image in data["images"]:
        lock = locks / f"{image['name']}.json"
        if lock.is_file():
            (directory / "locks" / lock.name).write_bytes(lock.read_bytes())
    return write_matrix(directory, data)


def write_matrix(directory: Path, data: dict) -> Path:
    """The matrix data as directory/matrix.yaml (keys in their order); its path."""
    path = directory / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def real_locked_matrix(directory: Path, edit=None) -> Path:
    """The real matrix's locked images, as locked_matrix: for tests of the images the real matrix builds."""
    return locked_matrix(directory, edit, MATRIX_PATH)
