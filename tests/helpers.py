"""Shared test helpers: the real matrix as data, edited per test and parsed back."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from imagegen import matrix as matrix_module
from imagegen import plan
from imagegen.errors import MatrixError

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
    return plan.resolve(matrix_module.read(MATRIX_PATH), TRAINER)


def spec_named(name: str):
    return next(spec for spec in specs() if spec.name == name)
