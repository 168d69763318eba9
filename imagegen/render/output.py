"""`imagegen render --out DIR`: locked images' build contexts on disk, a finished render swapped in whole."""

from __future__ import annotations

import json
from pathlib import Path

from imagegen_contract import atomic
from imagegen.core.errors import UserError
from imagegen.render.contexts import RENDER_MARKER, WHEELHOUSE, write_files
from imagegen.render.locked import LockedImage


def write(out: Path, images: list[LockedImage]) -> None:
    """Write every layer under OUT/<image and platform>/<layer>/, replacing an earlier render whole.

    The new render is assembled in a temporary sibling directory and renamed into place,
    so a failure leaves the previous output (or nothing) behind, never half a render.
    """
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is a file, not a folder; choose an empty or new --out folder")
    if out.exists() and not (out / RENDER_MARKER).exists() and any(out.iterdir()):
        raise UserError(f"{out}: exists and is not an imagegen render; choose an empty or new --out")
    with atomic.replaced_directory(out) as staging:
        _write_tree(staging, images)


def _write_tree(root: Path, images: list[LockedImage]) -> None:
    (root / RENDER_MARKER).write_text("rendered by imagegen; replaced whole by the next render\n")
    for image in images:
        for context in image.contexts:
            directory = root / context.image / context.layer
            write_files(directory, context.files)
            if context.mounts_wheelhouse:
                (directory / WHEELHOUSE).mkdir(exist_ok=True)
        description = {"image": image.as_dict(), "layers": {c.layer: c.ref for c in image.contexts}}
        (root / image.key / "image.json").write_text(json.dumps(description, indent=2, sort_keys=True) + "\n")
