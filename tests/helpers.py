"""Shared test helpers: the real matrix as data, edited per test and parsed back."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from imagegen.matrix import model as matrix_module
from imagegen.matrix import plan
from imagegen.core.errors import MatrixError
from imagegen.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
MATRIX_PATH = REPO / "matrix.yaml"
TRAINER = plan.Trainer("0.1.0")


def real_matrix_data() -> dict:
    return yaml.safe_load(MATRIX_PATH.read_text())


def image_named(data: dict, name: str) -> dict:
    return next(image for image in data["images"] if image["name"] == name)


def problems_of(data: dict) -> list:
    """The problems a matrix made of `data` has; [] when it resolves."""
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        plan.resolve(matrix_module.parse(text, "matrix.yaml"), TRAINER)
    except MatrixError as error:
        return error.problems
    return []


def rules_broken(data: dict) -> set[str]:
    return {problem.rule for problem in problems_of(data)}


def edited(edit) -> dict:
    data = copy.deepcopy(real_matrix_data())
    edit(data)
    return data


def specs():
    """Every image of the real matrix as imagegen plans it: with its lock, tags and labels where
    locks/ has a current lock for it."""
    return Workspace(MATRIX_PATH).load()[1]


def locked_specs():
    return [spec for spec in specs() if spec.lock]


def spec_named(name: str):
    return next(spec for spec in specs() if spec.name == name)


def locked_matrix(directory: Path, edit=None) -> Path:
    """The real matrix without the images locks/ has no lock for, beside a copy of the locks, after
    an optional edit of its data; returns the matrix's path."""
    data = real_matrix_data()
    data["images"] = [i for i in data["images"] if (REPO / "locks" / f"{i['name']}.json").is_file()]
    if edit:
        edit(data)
    (directory / "locks").mkdir(parents=True, exist_ok=True)
    for image in data["images"]:
        source = REPO / "locks" / f"{image['name']}.json"
        if source.is_file():
            (directory / "locks" / source.name).write_bytes(source.read_bytes())
    path = directory / "matrix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
