"""A directory of wheels as the installers inside a build see it.

The wheelhouse is staged into the framework layer's context and bind-mounted at /wheelhouse. pip
reads one page of links (find-links); uv reads a PEP 503 index of the files that fit the image's
Python and platform. Every link carries its sha256: in hash-checking mode pip prefers a file whose
hash it knows, and uv takes a version from the first index that has it, so that index must not
offer a version whose files cannot install here (an x86_64 torch wheel for an arm64 image).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from packaging import tags
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

from imagegen_contract import atomic

MOUNT = "/wheelhouse"  # where the templates mount it
PIP_PAGE = "index.html"
UV_INDEX = "simple"
SUFFIXES = (".whl", ".tar.gz", ".zip")
LEGACY_MANYLINUX = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}


def supported_tags(python: str, python_platform: str) -> frozenset[tags.Tag]:
    """The wheel tags an interpreter of python ("3.11") on python_platform ("aarch64-manylinux_2_36",
    uv's spelling, as the lock has it) installs."""
    machine, _, manylinux = python_platform.partition("-")
    glibc_minor = int(manylinux.rsplit("_", 1)[1])
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc_minor, 4, -1)]
    platforms += [f"{alias}_{machine}" for alias, minor in LEGACY_MANYLINUX.items() if minor <= glibc_minor]
    platforms.append(f"linux_{machine}")
    version = tuple(int(part) for part in python.split("."))
    interpreter = f"cp{python.replace('.', '')}"
    return frozenset([*tags.cpython_tags(version, platforms=platforms),
                      *tags.compatible_tags(version, interpreter, platforms)])


def project(filename: str) -> str | None:
    """The canonical project name of a wheel or sdist file; None for a name no installer would read."""
    try:
        parse = parse_wheel_filename if filename.endswith(".whl") else parse_sdist_filename
        return parse(filename)[0]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def fits(filename: str, supported: frozenset[tags.Tag]) -> bool:
    """A source distribution fits everywhere; a wheel where one of its tags is supported."""
    return not filename.endswith(".whl") or not parse_wheel_filename(filename)[3].isdisjoint(supported)


def pages(hashes: dict[str, str], supported: frozenset[tags.Tag], mount: str = MOUNT) -> dict[str, str]:
    """The wheelhouse's index pages by path: pip's page of every file, uv's page per project of the
    files that fit."""
    chosen = {PIP_PAGE: _links_page(hashes, "")}
    by_project: dict[str, dict[str, str]] = {}
    for name, digest in hashes.items():
        name_of_project = project(name)
        if name_of_project and fits(name, supported):
            by_project.setdefault(name_of_project, {})[name] = digest
    for name_of_project, files in by_project.items():
        chosen[f"{UV_INDEX}/{name_of_project}/index.html"] = _links_page(files, f"file://{mount}/")
    return chosen


def _links_page(hashes: dict[str, str], prefix: str) -> str:
    links = "".join(f'<a href="{prefix}{name}#sha256={digest}">{name}</a>\n' for name, digest in sorted(hashes.items()))
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"


def write_pages(wheelhouse: Path, wanted: dict[str, str]) -> None:
    """The index pages, each rewritten only when it changed, the others removed."""
    index = wheelhouse / UV_INDEX
    for stale in index.glob("*/index.html") if index.is_dir() else ():
        if str(stale.relative_to(wheelhouse)) not in wanted:
            stale.unlink()
            stale.parent.rmdir()
    for relative, page in wanted.items():
        path = wheelhouse / relative
        if not path.is_file() or path.read_text() != page:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(page)


def sync(source: Path | None, target: Path, hash_cache: Path, supported: frozenset[tags.Tag]) -> None:
    """target holds source's distributions (hard links where it can) and the pages for one image.

    The pages depend on the image's Python and platform alone, so each image's build sees the same
    wheelhouse every time and keeps its build cache, whichever image was staged before it."""
    target.mkdir(exist_ok=True)
    files = {f.name: f for f in source.iterdir() if f.name.endswith(SUFFIXES)} if source else {}
    for stale in target.iterdir():
        if stale.name not in files and stale.name not in (PIP_PAGE, UV_INDEX):
            stale.unlink()
    for name, file in sorted(files.items()):
        destination = target / name
        if destination.exists():
            continue
        try:
            os.link(file, destination)
        except OSError:  # another filesystem: a copy costs disk, but works
            shutil.copy2(file, destination)
    write_pages(target, pages(file_hashes(target, hash_cache), supported))


def file_hashes(directory: Path, cache_path: Path) -> dict[str, str]:
    """sha256 of every distribution in directory; hashed once per file (name, size, mtime), not per build."""
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    hashes, kept = {}, {}
    for path in directory.iterdir():
        if not path.name.endswith(SUFFIXES):
            continue
        stat = path.stat()
        key = f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in cache:
            digest = hashlib.sha256()
            with path.open("rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
            cache[key] = digest.hexdigest()
        hashes[path.name] = kept[key] = cache[key]
    atomic.write_text(cache_path, json.dumps(kept, indent=1, sort_keys=True))
    return hashes
