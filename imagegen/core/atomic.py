"""Replace a file or a directory whole: a reader (a browser, an artifact upload, the next
imagegen run) sees the old version or the new one, never half of either."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file beside `path`, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temp, 0o644)  # mkstemp makes 0600; reports are read by CI uploads and other users
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@contextmanager
def replaced_directory(path: Path) -> Iterator[Path]:
    """Yield an empty sibling directory to fill; on success it replaces `path` whole.

    On failure the sibling is removed and `path` is left as it was.
    """
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
    shutil.rmtree(previous, ignore_errors=True)
    path.rename(previous)
    staging.rename(path)
    shutil.rmtree(previous, ignore_errors=True)
