"""abi.extensions: every compiled file of the stack's own packages (flash-attn's CUDA module, DeepSpeed's prebuilt
ops, torchvision's ops) loads directly, not through its package, and an undefined symbol is named; where none of those
packages ships compiled files the runner skips it (NEEDS "compiled_code"). Needs no GPU."""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import re
from typing import Iterable, Optional

from vlmgrpo.image.checks import FAIL, PASS, Context, result
from vlmgrpo.image.checks._needs import EXTENSION_DISTRIBUTIONS, shared_objects

NAMES = ("abi.extensions",)
PHASE = "libraries"
NEEDS = ("compiled_code",)
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")


def load_extension(path: str) -> Optional[str]:
    """Load one compiled file the way Python would, not through its package; None, or why it failed.

    An extension module (it has PyInit_<name>) is imported from its file; any other shared
    library is dlopen()ed. Both resolve every symbol at once, so a wrong ABI shows here.
    """
    module = os.path.basename(path).split(".")[0]
    try:
        spec = importlib.util.spec_from_file_location(module, path, loader=importlib.machinery.ExtensionFileLoader(
            module, path))
        importlib.util.module_from_spec(spec)
        return None
    except ImportError as error:
        if "module export function" not in str(error):
            return _why(error)
    try:
        ctypes.CDLL(path)
        return None
    except OSError as error:
        return _why(error)


def _why(error: Exception) -> str:
    undefined = _UNDEFINED.search(str(error))
    return f"undefined symbol {undefined.group(1)}" if undefined else str(error).splitlines()[0][:300]


def extensions_check(distributions: Iterable[str] = EXTENSION_DISTRIBUTIONS) -> tuple[str, str]:
    try:
        import torch  # noqa: F401  -- extensions resolve torch's symbols from the libraries it loads
    except ImportError as error:
        return FAIL, f"torch not importable: {error}"
    paths = shared_objects(distributions)  # some: the runner checked the "compiled_code" need
    failures = [f"{_short(path)}: {why}" for path in paths for why in [load_extension(path)] if why]
    if failures:
        return FAIL, "; ".join(failures)[:2000]
    return PASS, f"{len(paths)} compiled files load: " + ", ".join(_short(path) for path in paths)[:1500]


def _short(path: str) -> str:
    marker = f"{os.sep}site-packages{os.sep}"
    return path.split(marker, 1)[-1]


def run(context: Context) -> list[dict[str, str]]:
    return [result("abi.extensions", *extensions_check())]
