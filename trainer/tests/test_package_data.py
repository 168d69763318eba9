"""Every file of the package that is not Python is package data: a data file left out of the wheel is missing in the
image only (FA4's targets.json was, and a run on a GPU the image lacks kernels for failed reading it)."""

import fnmatch
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vlmgrpo"


def test_every_data_file_of_the_package_is_in_its_wheel():
    pyproject = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["vlmgrpo"]
    data = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts]
    assert data and not [name for name in data if not any(fnmatch.fnmatch(name, p) for p in patterns)]
