"""Replace a file or a directory whole: a reader (a browser, an artifact upload, the next
imagegen run, a training run resuming from a checkpoint) sees the old version or the new one, never half of either.
imagegen's reports and locks and the trainer's checkpoints and outputs are written by these.

A read-modify-write of a file a person edits too (the matrix) holds `exclusive(path)` from the read to the
write, so two imagegen runs take turns, and passes what it read as `unchanged_from`: an edit made meanwhile
(an editor takes no lock) is refused with FileChanged, not overwritten.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

PathLike = Union[str, "os.PathLike[str]"]


class FileChanged(Exception):
    """The file is no longer what the caller read: someone wrote it meanwhile; it was left as they wrote it."""


def write_text(path: PathLike, text: str, unchanged_from: str | None = None) -> None:
    write_bytes(path, text.encode("utf-8"), None if unchanged_from is None else unchanged_from.encode("utf-8"))


def write_bytes(path: PathLike, data: bytes, unchanged_from: bytes | None = None) -> None:
    """Write to a temp file beside `path`, then rename it into place; with `unchanged_from`, only if `path` still
    holds exactly that when the new file is ready (else FileChanged)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, 0o644)  # mkstemp makes 0600; reports are read by CI uploads and other users
        if unchanged_from is not None and path.read_bytes() != unchanged_from:
            raise FileChanged(str(path))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock of `path` among imagegen's writers until the block ends: a flock on its folder, which, unlike
    the file, no rename replaces and no lock file litters; a second writer waits its turn."""
    handle = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing releases the lock


@contextmanager
def replaced_directory(path: Path) -> Iterator[Path]:
    """Yield an empty sibling directory to fill; on success it replaces `path` whole.

    On failure the sibling is removed and `path` is left as it was. A `path` that is a symbolic link stays one: what
    it points to is replaced (renaming the link aside left it behind as .NAME.previous, and the next replacement
    failed renaming a directory over it).
    """
    if path.is_symlink():
        path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield staging
        _swap_into_place(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_into_place(staging: Path, path: Path) -> None:
    # A directory cannot be renamed over a non-empty one: move the old one aside first.
    if not path.exists():
        staging.rename(path)
        return
    previous = path.with_name(f".{path.name}.previous")
    _remove(previous)
    path.rename(previous)
    staging.rename(path)
    _remove(previous)


def _remove(path: Path) -> None:
    """A directory left by an interrupted swap, or anything else of that name (a link, a file)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
