"""Whether this process can read the inputs and write the outputs, and what to do when it cannot.

The image trains as an arbitrary uid (`docker run --user`), so a file made by another user (transformers saves
model.safetensors as 0600) or an output directory owned by root is the common failure; say so before loading.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional


def describe(path: str) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return "cannot be inspected"
    return f"mode {stat.S_IMODE(info.st_mode):04o}, owner uid {info.st_uid}"


def unreadable(path: str) -> Optional[str]:
    """None when this process can read path (and enter it, for a directory); else the problem and the fix."""
    is_dir = os.path.isdir(path)
    if os.access(path, os.R_OK | (os.X_OK if is_dir else 0)):
        return None
    fix = f"chmod a+rX {path}" if is_dir else f"chmod a+r {path}"
    return f"{path} is not readable by uid {os.getuid()} ({describe(path)}); make it readable: {fix}"


def unreadable_in_tree(root: str) -> list[str]:
    """Every file or directory under root this process cannot read, the unreadable directories not entered."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        for name in list(subdirectories):
            path = os.path.join(directory, name)
            if unreadable(path):
                found.append(path)
                subdirectories.remove(name)
        found.extend(os.path.join(directory, name) for name in files if unreadable(os.path.join(directory, name)))
    return found


def nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def unwritable_directory(path: str) -> Optional[str]:
    """None when path is, or can be created as, a directory this process writes; else the problem."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        return f"{path} exists and is not a directory"
    existing = nearest_existing(target)
    if not existing.is_dir():
        return f"{existing} is not a directory, so {path} cannot be created"
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    what = path if existing == target.absolute() else f"{existing} (to create {path} in it)"
    return (f"cannot write to {what} as uid {os.getuid()} ({describe(str(existing))}, or a read-only mount); "
            "choose an --output you own, or make it writable (docker run --user $(id -u):$(id -g) with a "
            "directory of yours mounted)")
