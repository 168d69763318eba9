"""Where imagegen finds its inputs (the matrix, its locks, the templates and the trainer source), and the
plan they make: every planned image, the locked ones rendered once with their tags and labels, and why
each other one is not locked.

It reads the filesystem and may import every package below it (core, engine, matrix, locking, facts, render);
the stages and the command line read the plan from here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import imagegen_contract as contract
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from imagegen.core import jsonsource
from imagegen.core.errors import Problem, UserError
from imagegen.locking import claims, inputs, lockfile
from imagegen.locking.lockfile import Lock
from imagegen.matrix import model as matrix_module
from imagegen.matrix import plan as plan_module
from imagegen.matrix.plan import PlannedImage
from imagegen.matrix.rules import PYTORCH_INDEX
from imagegen.matrix.yamlsource import format_path
from imagegen.render.contexts import Renderer, RenderOptions
from imagegen.render.locked import LockedImage, driver_problems, lock_images

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# imagegen works on the repository it runs in, as git does: the nearest folder from the current directory upwards
# that holds a matrix.yaml, or the one this variable names; never the checkout imagegen was installed from.
REPOSITORY_VARIABLE = "IMAGEGEN_REPO"
MATRIX_FILE = "matrix.yaml"
LOCKS_WORKFLOW = ".github/workflows/locks.yml"


@dataclass
class Plan:
    """The matrix and every platform of every image it plans, locked or not."""

    matrix: matrix_module.Matrix
    images: list[PlannedImage]
    locked: dict[str, LockedImage]  # by key (image and platform)
    # by key: why it is not locked; the problems of its lock file, at their lines there, where it is one imagegen
    # would not write or one whose entries belie what it claims
    lock_problems: dict[str, str | tuple[Problem, ...]] = field(default_factory=dict)
    lock_warnings: dict[str, str] = field(default_factory=dict)  # by key: not locked here, and that is expected

    def state(self, plan: PlannedImage) -> str:
        """"locked", or why not, in a few words, for listings."""
        if plan.key in self.locked:
            return "locked"
        return "needs the PyTorch index" if plan.key in self.lock_warnings else "no lock"

    def problems(self) -> list[Problem]:
        """What `imagegen validate` refuses: images without a current lock that could have one, the matrix's facts a
        lock contradicts, and a driver requirement the rendered image states otherwise; once per image, not per
        platform."""
        found = []
        for plan in self.images:
            entry = self.matrix.images[plan_module.index_of(self.matrix, plan.name)]
            why = self.lock_problems.get(plan.key)
            if isinstance(why, tuple):
                found += why
            elif why is not None:
                rule = "lock-stale" if "stale" in why else "lock-missing"
                found.append(self.matrix.problem(("images", entry.index, "name"), why, rule))
            elif plan.key in self.locked:
                found += inputs.fact_problems(self.matrix, plan, self.locked[plan.key].lock)
                found += driver_problems(self.matrix, self.locked[plan.key])
        return list(dict.fromkeys(found))

    def require_locked(self, chosen: list[PlannedImage]) -> list[LockedImage]:
        """The chosen images, locked; else one line per platform of an image that is not."""
        missing = [f"{plan.key}: {line}" for plan in chosen if plan.key not in self.locked
                   for line in _lines(self.lock_problems.get(plan.key) or self.lock_warnings.get(plan.key))]
        if missing:
            raise UserError("\n".join(missing))
        return [self.locked[plan.key] for plan in chosen]


def repository_root(start: Path | None = None, environ: Mapping[str, str] = os.environ) -> Path:
    """The repository imagegen works on: $IMAGEGEN_REPO, else the nearest folder from `start` (the current directory)
    upwards that holds a matrix.yaml, else `start` itself (where a command then says there is no matrix)."""
    if environ.get(REPOSITORY_VARIABLE):
        return Path(environ[REPOSITORY_VARIABLE])
    here = (start or Path.cwd()).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / MATRIX_FILE).is_file()), here)


@dataclass(frozen=True)
class Workspace:
    matrix: Path = field(default_factory=lambda: repository_root() / MATRIX_FILE)
    templates: Path = field(default_factory=lambda: repository_root() / "templates")
    trainer: Path = field(default_factory=lambda: repository_root() / "trainer")
    # the contract distribution the trainer requires, installed beside it in every image (no index holds it)
    contract: Path = field(default_factory=lambda: repository_root() / "contract")
    locks: Path | None = None  # default: locks/ beside the matrix

    @classmethod
    def of(cls, matrix: Path | None = None, templates: Path | None = None, trainer: Path | None = None,
           locks: Path | None = None, root: Path | None = None) -> "Workspace":
        """The repository's inputs (root's: repository_root() unless given), each replaced where it is named (the
        command line's --matrix, ...)."""
        root = root or repository_root()
        return cls(matrix or root / MATRIX_FILE, templates or root / "templates", trainer or root / "trainer",
                   contract=root / "contract", locks=locks)

    @property
    def lock_dir(self) -> Path:
        return self.locks or self.matrix.parent / "locks"

    def lock_path(self, image: str) -> Path:
        """locks/IMAGE.json; a name that would leave the folder (the schema refuses such names) is refused."""
        path = self.lock_dir / f"{image}.json"
        if path.resolve().parent != self.lock_dir.resolve():
            raise UserError(f"{image!r}: a lock file of this name would be written outside {self.lock_dir}")
        return path

    def lock_command(self, image: str) -> str:
        """The command that (re)writes an image's lock, as the user would type it here."""
        command = "imagegen lock"
        if self.matrix.resolve() != (repository_root() / MATRIX_FILE).resolve():
            command += f" --matrix {self.matrix}"
        if self.locks is not None:
            command += f" --locks {self.locks}"
        return f"{command} --image {image}"

    def load(self, options: RenderOptions = RenderOptions()) -> Plan:
        """The plan: the matrix, every planned image, the locked ones rendered once with `options`; raises
        MatrixError on any problem of the matrix itself."""
        loaded = matrix_module.read(self.matrix)
        plans = plan_module.resolve(loaded, read_trainer(self.trainer))
        locks, problems, warnings = {}, {}, {}
        for plan in plans:
            lock, why = self._lock_of(plan)
            if lock is not None:
                locks[plan.key] = lock
            elif plan.torch.lock_source == PYTORCH_INDEX and isinstance(why, str):
                warnings[plan.key] = self._unreachable(plan, why)
            else:
                problems[plan.key] = why
        renderer = Renderer.of(self.templates, self.trainer, self.contract, options)
        locked = lock_images(plans, locks, renderer, loaded.latest)
        for plan in plans:  # a platform locked while another platform of its image is not
            if plan.key in locks and plan.key not in locked:
                problems[plan.key] = f"another platform of {plan.name} has no current lock; run " \
                                     f"`{self.lock_command(plan.name)}`"
        return Plan(loaded, plans, locked, problems, warnings)

    def _unreachable(self, plan: PlannedImage, why: str) -> str:
        """An image declared `lock: pytorch-index` without a current lock: expected where that index is out of
        reach, so said, not refused, until something builds it."""
        problem = why.rsplit("; run `", 1)[0]
        return (f"not locked ({problem}): its torch build is on the PyTorch index alone ({plan.torch.index_url}); "
                f"run `{self.lock_command(plan.name)}` where that index answers, or let the scheduled locks "
                f"workflow ({LOCKS_WORKFLOW}) lock it")

    def _lock_of(self, plan: PlannedImage) -> tuple[Lock | None, str | tuple[Problem, ...]]:
        path, command = _shown(self.lock_path(plan.name)), self.lock_command(plan.name)
        text = ""
        try:
            text = path.read_text()
            locks = lockfile.loads(text, command)
        except FileNotFoundError:
            return None, f"no lock at {path}; run `{command}`"
        except (OSError, UnicodeDecodeError, lockfile.LockFormatError) as error:
            if isinstance(error, lockfile.LockFormatError) and error.where:
                return None, _located(path, text, [claims.Mismatch(error.where, error.message, "lock-format")],
                                      command)
            return None, f"{path} is not a lock imagegen wrote ({error}); run `{command}`"
        lock = locks.get(plan.platform)
        if lock is None:
            return None, f"{path} has no {plan.platform} lock; run `{command}`"
        reasons = lockfile.stale_reasons(lock, inputs.lock_inputs(plan))
        if reasons:
            return None, f"{path} is stale ({'; '.join(reasons)}); run `{command}`"
        mismatches = claims.mismatches(plan, locks)
        if mismatches:
            return None, _located(path, text, mismatches, command)
        return lock, ""


def _located(path: Path, text: str, mismatches: list[claims.Mismatch], command: str) -> tuple[Problem, ...]:
    """Each at its line and key path in the lock file, with the command that writes the lock again."""
    return tuple(Problem(str(path), jsonsource.line_of(text, m.where), format_path(m.where),
                         f"{m.message}; run `{command}`", m.rule) for m in mismatches)


def _lines(why: str | tuple[Problem, ...]) -> list[str]:
    return [str(problem) for problem in why] if isinstance(why, tuple) else [why]


def _shown(path: Path) -> Path:
    """A path as a user in the current directory would type it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _from_index(requirements) -> tuple[Requirement, ...]:
    """The requirements an image's lock resolves from the index: all but the contract distribution, which the image
    installs from this repository's source beside the trainer (templates/trainer.Dockerfile.j2)."""
    parsed = (Requirement(r) for r in requirements)
    return tuple(r for r in parsed if canonicalize_name(r.name) != canonicalize_name(contract.DISTRIBUTION))


def read_trainer(trainer_dir: Path) -> plan_module.Trainer:
    """The trainer's version (the first part of every tag) and what it requires of the image."""
    pyproject = trainer_dir / "pyproject.toml"
    try:
        with pyproject.open("rb") as handle:
            document = tomllib.load(handle)
        project = document["project"]
        build = document.get("build-system", {}).get("requires", ())
        extras = project.get("optional-dependencies", {})
        return plan_module.Trainer(project["version"], _from_index(project.get("dependencies", ())),
                                   tuple(Requirement(r) for r in build),
                                   {name: _from_index(wanted) for name, wanted in extras.items()})
    except FileNotFoundError:
        raise UserError(f"{pyproject}: missing; the trainer's version names every image. "
                        "Pass --trainer DIR") from None
    except (KeyError, tomllib.TOMLDecodeError, InvalidRequirement) as exc:
        raise UserError(f"{pyproject}: cannot read [project] version and dependencies: {exc}") from None
