"""Files written whole or not at all: a temporary file beside the target, renamed into place."""

from __future__ import annotations

import os


def write_text(path: str, text: str) -> None:
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, path)  # atomic on one filesystem: readers see the old file or the new one
