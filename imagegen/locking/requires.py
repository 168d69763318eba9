"""What each locked release requires, as its index's metadata says (Requires-Dist, markers and extras as written).

`imagegen lock` records it beside each entry, read from the very file set the entry's hashes name: a wheel for the
lock's Python and machine where there is one (metadata can differ between a release's wheels), else any wheel of it,
else its sdist's PKG-INFO. The lock's graph is then checked offline against it (`claims`), and `imagegen facts check`
reads it from the index again, so an entry edited by hand, its requirements included, is found either way.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Iterable

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from imagegen.locking import index
from imagegen.locking.lockfile import LockedPackage
from imagegen.matrix.plan import PYPI

READERS = 16  # metadata read at once: each read waits on the index, not on this machine
ATTEMPTS = 3  # a read the network drops is tried again: one lock reads some 200 releases' metadata


def metadata_file(files: list[index.IndexFile], hashes: Iterable[str], python: str,
                  machine: str) -> index.IndexFile | None:
    """The file of a release whose metadata stands for the locked entry (see the module's docstring)."""
    locked = {h.removeprefix("sha256:") for h in hashes}
    files = [f for f in files if f.sha256 in locked] or files
    wheels = [f for f in files if f.is_wheel]
    fitting = [f for f in wheels if _fits(f.filename, python, machine)]
    return (fitting or wheels or [f for f in files if not f.is_wheel] or [None])[0]


def _fits(filename: str, python: str, machine: str) -> bool:
    try:
        tags = parse_wheel_filename(filename)[3]
    except InvalidWheelFilename:
        return False
    cpython = "cp" + python.replace(".", "")
    return any((tag.platform == "any" or (tag.platform.endswith("_" + machine) and "linux" in tag.platform))
               and (tag.interpreter.startswith("py") or tag.interpreter == cpython or tag.abi == "abi3")
               for tag in tags)


@lru_cache(maxsize=None)
def release_requires(file: index.IndexFile) -> tuple[str, ...]:
    """A release file's Requires-Dist lines, as its metadata writes them."""
    metadata = index.wheel_metadata(file) if file.is_wheel else index.sdist_metadata(file)
    return tuple(metadata.get("Requires-Dist", ()))


@lru_cache(maxsize=None)
def _project_files(index_url: str, name: str) -> list[index.IndexFile]:
    """A project's files, read once per process: `imagegen lock` of every image reads the same projects."""
    return index.project_files(index_url, name)


def read_requires(packages: Iterable[LockedPackage], python: str, machine: str) -> dict[str, tuple[str, ...]]:
    """Each package's requirements (by name) from its index; PackageIndexError when the index does not answer."""
    packages = list(packages)

    def read(package: LockedPackage) -> tuple[str, ...]:
        for attempt in range(ATTEMPTS):
            try:
                files = index.of_version(_project_files(package.index or PYPI, package.name), package.version)
                file = metadata_file(files, package.hashes, python, machine)
                if file is None:
                    raise index.PackageIndexError(f"{package.name} {package.version}: its index lists no file of it")
                return release_requires(file)
            except index.PackageIndexError:
                if attempt == ATTEMPTS - 1:
                    raise

    with ThreadPoolExecutor(READERS) as pool:
        return dict(zip((p.name for p in packages), pool.map(read, packages)))
