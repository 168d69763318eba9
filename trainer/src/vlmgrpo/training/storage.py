"""Disk space for checkpoints: the size one takes, a warning at start when the output's disk holds only a few, and
one clear line (instead of safetensors' or torch.save's traceback) when the disk fills while one is written."""

from __future__ import annotations

import logging
import os
import resource
import shutil
from typing import Optional

from vlmgrpo.training.checkpoint import checkpoint_dirs, is_complete, latest_checkpoint
from vlmgrpo.errors import UserError

log = logging.getLogger("vlmgrpo")
FEW_CHECKPOINTS = 3
# How a full disk shows through the writers a checkpoint uses: errno 28 (OSError), safetensors' Rust IoError
# ("StorageFull", "os error 28"), torch.save's zip writer ("file write failed", which names no cause).
_FULL = ("no space left on device", "storagefull", "os error 28", "disk quota exceeded")
_WRITE_FAILED = ("file write failed", "unexpected pos")
# How a file grown past the process's file size limit (ulimit -f, RLIMIT_FSIZE, as schedulers set it) shows: errno 27
# (EFBIG; Python ignores SIGXFSZ, so the write fails instead of the process being killed), "File too large".
_TOO_LARGE = ("file too large", "os error 27")


class DiskFullError(UserError):
    exit_code = 1


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def checkpoint_bytes(model, output: str) -> int:
    """The newest complete checkpoint's size, else an estimate: the weights in their dtype, and Adam's two fp32
    moments of each trainable parameter."""
    newest = latest_checkpoint(output)
    if newest:
        return directory_bytes(newest)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights + sum(p.numel() * 8 for p in model.parameters() if p.requires_grad)


def megabytes(count: float) -> str:
    return f"{count / 1e6:.1f} MB" if count < 1e9 else f"{count / 1e9:.1f} GB"


def warn_if_few_checkpoints_fit(model, output: str) -> None:
    need, free = checkpoint_bytes(model, output), shutil.disk_usage(output).free
    if free < FEW_CHECKPOINTS * need:
        log.warning("only %s free under %s, room for %d checkpoint(s) of about %s: free space, set save_total_limit, "
                    "or choose another --output before the disk fills mid-run", megabytes(free), output,
                    free // max(need, 1), megabytes(need))


def is_out_of_space(error: BaseException, output: str, need: int) -> bool:
    """The error, or one it was raised from, says the disk is full; or a write failed and the disk is (nearly)
    full."""
    seen: Optional[BaseException] = error
    while seen is not None:
        text = str(seen).lower()
        if getattr(seen, "errno", None) == 28 or any(mark in text for mark in _FULL):
            return True
        if any(mark in text for mark in _WRITE_FAILED) and shutil.disk_usage(output).free < need:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def file_size_limit() -> Optional[int]:
    """This process's limit on the size of a file it writes (ulimit -f), in bytes; None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def is_past_file_size_limit(error: BaseException) -> bool:
    """The error, or one it was raised from, says a file grew past the file size limit; or a write failed (torch's
    zip writer names no cause) while there is such a limit."""
    seen: Optional[BaseException] = error
    while seen is not None:
        text = str(seen).lower()
        if getattr(seen, "errno", None) == 27 or any(mark in text for mark in _TOO_LARGE):
            return True
        if any(mark in text for mark in _WRITE_FAILED) and file_size_limit() is not None:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def past_file_size_limit(output: str, step: int) -> DiskFullError:
    """Remove the checkpoint being written and say, in one line, that the file size limit stopped it."""
    removed, newest = _after_failed_checkpoint(output)
    return DiskFullError(
        f"a file of the checkpoint of step {step} under {output} grew past this process's file size limit "
        f"({megabytes(file_size_limit() or 0)}: ulimit -f, as a scheduler may set it){removed}; raise the limit "
        "(ulimit -f unlimited, or the scheduler's own option), then "
        + ("continue with --resume auto" if newest else "start again"))


def disk_full(output: str, step: int, need: int) -> DiskFullError:
    """Remove the checkpoint being written (incomplete: resume skips it anyway) and say what to do, in one line."""
    removed, newest = _after_failed_checkpoint(output)
    return DiskFullError(
        f"the disk under {output} filled while the checkpoint of step {step} was written (a checkpoint takes about "
        f"{megabytes(need)}, {megabytes(shutil.disk_usage(output).free)} are free{removed}); the newest complete "
        "checkpoint is " + (f"{os.path.basename(newest)}: free space, then continue with --resume auto" if newest
                            else "none: free space (or set save_total_limit) and start again"))


def _after_failed_checkpoint(output: str) -> tuple[str, Optional[str]]:
    """Remove the incomplete checkpoints (resume skips them anyway): ("; removed the incomplete ..." or "", the
    newest complete checkpoint or None)."""
    removed = [path for path in checkpoint_dirs(output) if not is_complete(path)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    said = f"; removed the incomplete {', '.join(os.path.basename(p) for p in removed)}" if removed else ""
    return said, latest_checkpoint(output)
