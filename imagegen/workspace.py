"""Where imagegen finds its inputs (the matrix, its locks, the templates and the trainer source),
and the whole plan they make: every image with its lock, inputs digest, tags and labels."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from imagegen.locking import lockfile
from imagegen.matrix import plan
from imagegen.render import contexts as render, tags
from imagegen.matrix import model as matrix_module
from imagegen.core.errors import UserError

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
    locks: Path | None = None  # default: locks/ beside the matrix

    @property
    def lock_dir(self) -> Path:
        return self.locks or self.matrix.parent / "locks"

    def lock_path(self, image: str) -> Path:
        return self.lock_dir / f"{image}.json"

    def lock_command(self, image: str) -> str:
        """The command that (re)writes an image's lock, as the user would type it here."""
        command = "imagegen lock"
        if self.matrix != Workspace.matrix:
            command += f" --matrix {self.matrix}"
        if self.locks is not None:
            command += f" --locks {self.locks}"
        return f"{command} --image {image}"

    def load(self) -> tuple[matrix_module.Matrix, list[plan.ImageSpec]]:
        """The matrix and every image it resolves to, each with its lock where it has a current one;
        raises MatrixError on any problem of the matrix itself."""
        loaded = matrix_module.read(self.matrix)
        specs = [self._with_lock(spec) for spec in plan.resolve(loaded, read_trainer(self.trainer))]
        return loaded, tags.assign(specs, loaded.latest, self._inputs_digests(specs))

    def _inputs_digests(self, specs: list[plan.ImageSpec]) -> dict[str, str]:
        """One digest per image, of every platform's layers, for an image whose every platform is locked.
        Every layer names its image, so two images never share a version tag."""
        contexts = render.render_specs(self.templates, self.trainer, [spec for spec in specs if spec.lock])
        digests = {}
        for name in dict.fromkeys(spec.name for spec in specs):
            keys = [spec.key for spec in specs if spec.name == name]
            if all(key in contexts for key in keys):
                digests[name] = render.inputs_digest([layer for key in sorted(keys) for layer in contexts[key]])
        return digests

    def _with_lock(self, spec: plan.ImageSpec) -> plan.ImageSpec:
        path, command = _shown(self.lock_path(spec.name)), self.lock_command(spec.name)
        try:
            locks = lockfile.loads(path.read_text(), command)
        except FileNotFoundError:
            return replace(spec, lock_problem=f"no lock at {path}; run `{command}`")
        except (OSError, UnicodeDecodeError, lockfile.LockFormatError) as error:
            return replace(spec, lock_problem=f"{path} is not a lock imagegen wrote ({error}); run `{command}`")
        lock = locks.get(spec.platform)
        if lock is None:
            return replace(spec, lock_problem=f"{path} has no {spec.platform} lock; run `{command}`")
        reasons = lockfile.stale_reasons(lock, plan.lock_inputs(spec))
        if reasons:
            return replace(spec, lock_problem=f"{path} is stale ({'; '.join(reasons)}); run `{command}`")
        return plan.with_lock(spec, lock)


def _shown(path: Path) -> Path:
    """A path as a user in the current directory would type it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def require_locked(specs: list[plan.ImageSpec]) -> list[plan.ImageSpec]:
    """The specs, when every one has a current lock; else one line per image that has none."""
    problems = [f"{spec.key}: {spec.lock_problem}" for spec in specs if spec.lock is None]
    if problems:
        raise UserError("\n".join(problems))
    return specs


def read_trainer(trainer_dir: Path) -> plan.Trainer:
    """The trainer's version (the first part of every tag) and what it requires of the image."""
    pyproject = trainer_dir / "pyproject.toml"
    try:
        with pyproject.open("rb") as handle:
            document = tomllib.load(handle)
        project = document["project"]
        build = document.get("build-system", {}).get("requires", ())
        extras = project.get("optional-dependencies", {})
        return plan.Trainer(project["version"], tuple(Requirement(r) for r in project.get("dependencies", ())),
                            tuple(Requirement(r) for r in build),
                            tuple(Requirement(r) for r in extras.get(plan.CUDA_EXTRA, ())))
    except FileNotFoundError:
        raise UserError(f"{pyproject}: missing; the trainer's version names every image. "
                        "Pass --trainer DIR") from None
    except (KeyError, tomllib.TOMLDecodeError, InvalidRequirement) as exc:
        raise UserError(f"{pyproject}: cannot read [project] version and dependencies: {exc}") from None
