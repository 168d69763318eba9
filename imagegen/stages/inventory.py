"""What an image holds, as the one inventory program reports it: vlmgrpo/inventory.py in the trainer, a
standard-library program imagegen runs as text inside any image with Python (also under QEMU emulation,
where importing torch crashes), so that `imagegen test`, `imagegen sbom` and the image's own `vlmgrpo info`
and `vlmgrpo selftest` read one answer. The check runner (vlmgrpo/checkrunner.py) is loaded from the same source:
the host's checks and the image's run by it."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Sequence
from importlib.machinery import PathFinder
from pathlib import Path
from types import ModuleType

from imagegen.core.errors import UserError
from imagegen.engine import containers
from imagegen.engine.containers import ContainerError

MODULE = "vlmgrpo.inventory"  # what the image runs as `python -m vlmgrpo.inventory`
RUNNER = "vlmgrpo.checkrunner"  # the one check runner, of the host's checks and the image's own
TIMEOUT_S = 600


def program(trainer_dir: Path, package_folders: Sequence[str]) -> str:
    """The inventory program's text, from the trainer source the images are built from: the module found as Python
    imports it from that source (its package folders: workspace.read_trainer), so a move inside the trainer moves it
    here too."""
    path = module_path(trainer_dir, package_folders, MODULE)
    try:
        return path.read_text()
    except OSError as error:
        raise UserError(f"{path}: cannot read the inventory program ({error.strerror}); pass --trainer DIR, the "
                        "trainer source the image was built from") from None


def runner(trainer_dir: Path, package_folders: Sequence[str]) -> ModuleType:
    """The check runner the image's own checks run by, loaded from the same trainer source as the inventory program
    (a standard-library module that imports nothing of the trainer), so the host's checks run by it too."""
    return _loaded(module_path(trainer_dir, package_folders, RUNNER))


@functools.cache
def _loaded(path: Path) -> ModuleType:
    """A standard-library module loaded from its file, once, under a name of its own (not the trainer's package, which
    imagegen's environment need not hold)."""
    spec = importlib.util.spec_from_file_location("imagegen_" + RUNNER.replace(".", "_"), path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as error:
        raise UserError(f"{path}: cannot read the check runner ({error.strerror}); pass --trainer DIR, the trainer "
                        "source the image was built from") from None
    return module


def module_path(trainer_dir: Path, package_folders: Sequence[str], module: str) -> Path:
    """The file of a module in a source tree, found by Python's own path finder in the tree's package folders."""
    package = module.rpartition(".")[0]
    roots = [str(trainer_dir / where) for where in package_folders]
    found = PathFinder.find_spec(package, roots)
    if found is not None and found.submodule_search_locations:
        spec = PathFinder.find_spec(module, list(found.submodule_search_locations))
        if spec is not None and spec.origin:
            return Path(spec.origin)
    raise UserError(f"{trainer_dir}: no module {module} under {', '.join(roots)}; pass --trainer DIR, the trainer "
                    "source the image was built from")


def of_image(image: str, text: str, *, client=None) -> dict:
    """The inventory of a local image; ContainerError when the image cannot run it."""
    run = containers.run_in_image(image, ["python", "-c", text], gpu=False, timeout_s=TIMEOUT_S, client=client)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        detail = " | ".join((run.stderr or run.stdout).strip().splitlines()[-3:])
        raise ContainerError(f"{image}: cannot list what it holds (`python -c <inventory>` exited {run.exit_code}: "
                             f"{detail}); the image needs `python` on its PATH") from None
