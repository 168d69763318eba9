"""A writable HOME and caches for any uid, set up by the command itself: standard library only.

`docker run --user UID:GID` gives a uid without a home directory (or HOME=/ it cannot write), and Slurm's pyxis/enroot
and Apptainer's `exec` ignore the image's ENTRYPOINT: whatever set this up outside the command would be skipped
there. `vlmgrpo` calls `prepare()` before any library that caches (Hugging Face, torch extensions, triton,
matplotlib) is imported; the image's entrypoint runs any other command through `python -m vlmgrpo.image.environment CMD
ARGS...`, which prepares the same environment and execs CMD.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import MutableMapping, Optional

# Cache variables and where each goes under XDG_CACHE_HOME unless it is set already.
CACHES = {"TORCH_EXTENSIONS_DIR": "torch_extensions", "TRITON_CACHE_DIR": "triton", "MPLCONFIGDIR": "matplotlib"}
# getpass.getuser() reads these before the password database, where an arbitrary uid has no entry (torch's
# inductor and triton name their caches by it and raise KeyError without one).
USER_VARIABLES = ("LOGNAME", "USER", "LNAME", "USERNAME")


def writable_directory(path: Optional[str]) -> bool:
    return bool(path) and os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def known_user(uid: int) -> bool:
    try:
        import pwd

        pwd.getpwuid(uid)
        return True
    except (ImportError, KeyError):
        return False


class NoWritableHome(Exception):
    """Neither HOME nor a temporary directory is writable: one line, exit 2 (the command cannot keep a file)."""

    def __init__(self, environ: MutableMapping[str, str]):
        super().__init__(
            f"no writable directory for HOME: HOME ({environ.get('HOME') or 'unset'}), TMPDIR "
            f"({environ.get('TMPDIR') or 'unset'}) and /tmp are not writable by uid {os.getuid()} (a read-only root "
            "filesystem?); give the container a writable /tmp (docker run --read-only --tmpfs /tmp) or HOME (a "
            "volume, with -e HOME=...)")


def prepare(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set HOME (a fresh directory under the temporary directory when it is unset or not writable), XDG_CACHE_HOME
    and the caches under it (each only when unset), and USER for a uid the password database does not know.
    Returns what it changed. Idempotent: a child process finds everything in place and changes nothing.
    NoWritableHome where no directory for HOME can be made."""
    changed = {}
    if not writable_directory(environ.get("HOME")):
        try:
            changed["HOME"] = tempfile.mkdtemp(prefix="home.", dir=writable_temporary_directory(environ))
        except OSError:
            raise NoWritableHome(environ) from None
        environ["HOME"] = changed["HOME"]
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(environ["HOME"], ".cache")
    for name, value in (("XDG_CACHE_HOME", cache), *((key, os.path.join(cache, sub)) for key, sub in CACHES.items())):
        if not environ.get(name):
            environ[name] = changed[name] = value
    if not any(environ.get(name) for name in USER_VARIABLES) and not known_user(os.getuid()):
        environ["USER"] = changed["USER"] = f"uid{os.getuid()}"
    return changed


def writable_temporary_directory(environ: MutableMapping[str, str]) -> str:
    """TMPDIR when this uid can write it (Slurm jobs often set one per job), else /tmp."""
    candidate = environ.get("TMPDIR")
    return candidate if writable_directory(candidate) else "/tmp"


def main(argv: list[str]) -> int:
    """`python -m vlmgrpo.image.environment CMD [ARGS...]`: prepare, then exec CMD (the image's entrypoint runs every
    command that is not vlmgrpo's this way)."""
    if not argv:
        print("usage: python -m vlmgrpo.image.environment COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        prepare()
    except NoWritableHome as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"error: {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
