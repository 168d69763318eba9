"""Where imagegen finds its inputs: the matrix, the templates and the trainer source."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from . import matrix as matrix_module
from . import plan
from .errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Workspace:
    matrix: Path = REPO_ROOT / "matrix.yaml"
    templates: Path = REPO_ROOT / "templates"
    trainer: Path = REPO_ROOT / "trainer"

    def load(self) -> tuple[matrix_module.Matrix, list[plan.ImageSpec]]:
        """The matrix and every image it resolves to; raises MatrixError on any problem."""
        loaded = matrix_module.read(self.matrix)
        return loaded, plan.resolve(loaded, read_trainer(self.trainer))


def read_trainer(trainer_dir: Path) -> plan.Trainer:
    """The trainer's version (the first part of every tag) and what it requires of the image."""
    pyproject = trainer_dir / "pyproject.toml"
    try:
        with pyproject.open("rb") as handle:
            document = tomllib.load(handle)
        project = document["project"]
        build = document.get("build-system", {}).get("requires", ())
        return plan.Trainer(project["version"], tuple(Requirement(r) for r in project.get("dependencies", ())),
                            tuple(Requirement(r) for r in build))
    except FileNotFoundError:
        raise UserError(f"{pyproject}: missing; the trainer's version names every image. "
                        "Pass --trainer DIR") from None
    except (KeyError, tomllib.TOMLDecodeError, InvalidRequirement) as exc:
        raise UserError(f"{pyproject}: cannot read [project] version and dependencies: {exc}") from None
