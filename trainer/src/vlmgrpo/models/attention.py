"""Which attention kernel a model loads with: flash-attention 4 where the image has it and every GPU runs it, else
flash-attention 2 where it imports and every GPU is sm80+, else torch's SDPA. One log line says which and why; an
explicit choice the image or the GPUs cannot honour is one ConfigError, raised before any weight loads.

Both flash-attention packages install the module `flash_attn` (flash-attn-4 as a namespace holding `flash_attn.cute`
only), so an import says nothing about which one is there: the installed distribution does, as transformers decides
it too (utils/import_utils.py, is_flash_attn_4_available). Nothing here imports flash_attn.cute, whose CUTLASS DSL
takes seconds to import: transformers imports it when the model loads with it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from typing import Optional

from vlmgrpo.errors import ConfigError

log = logging.getLogger("vlmgrpo")

FA2, FA4 = "flash_attention_2", "flash_attention_4"
FA2_MIN_MAJOR = 8  # flash-attn 2 runs on Ampere and newer
# flash-attn-4's interface asserts compute capability 8.x to 12.x (flash_attn/cute/interface.py); transformers may
# dispatch it on fewer (5.24 from 9.0: FLASH_ATTENTION_COMPATIBILITY_MATRIX), and its word is read at run time.
FA4_OWN_MAJORS = (8, 12)


def installed(distribution: str) -> Optional[str]:
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_capabilities() -> list[tuple[int, int]]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [tuple(torch.cuda.get_device_capability(index)) for index in range(torch.cuda.device_count())]


def fa4_majors() -> tuple[int, int]:
    """The compute capability majors flash-attention 4 runs on here: its own range, narrowed by transformers'."""
    low, high = FA4_OWN_MAJORS
    try:
        from transformers.modeling_flash_attention_utils import FLASH_ATTENTION_COMPATIBILITY_MATRIX

        low = max(low, FLASH_ATTENTION_COMPATIBILITY_MATRIX[4].get("cuda_min_major_version") or low)
    except (ImportError, KeyError, AttributeError):  # a transformers without flash-attention 4
        pass
    return low, high


def _first_outside(gpus: list[tuple[int, int]], low: int, high: int) -> Optional[str]:
    for index, (major, minor) in enumerate(gpus):
        if not low <= major <= high:
            return f"GPU {index} is sm{major}{minor}"
    return None


# nvidia-cutlass-dsl's wheels put its module `cutlass` on sys.path through a .pth file, which Python reads only in a
# site directory: installed with `pip install --target DIR` and put on PYTHONPATH, flash-attn-4 is found and its DSL
# is not ("No module named 'cutlass'" when the model loads; seen on a lent H200, bench/RESULTS.md section 17).
CUTLASS_OFF_PATH = ("its CUTLASS DSL's module cutlass is not on the path (nvidia-cutlass-dsl adds it with a .pth file, "
                    "which Python reads only in a site-packages directory: install with pip into the environment, "
                    "not with --target on PYTHONPATH, or add the directory with site.addsitedir)")


def cutlass_on_path() -> bool:
    """Whether `import cutlass` would find the module, without importing it (that takes seconds)."""
    return importlib.util.find_spec("cutlass") is not None


def fa4_status(gpus: list[tuple[int, int]]) -> tuple[bool, str]:
    """Whether flash-attention 4 can run on these GPUs, and why."""
    version = installed("flash-attn-4")
    if version is None:
        return False, "flash-attn-4 is not installed"
    if not cutlass_on_path():
        return False, f"flash-attn-4 {version} is installed but {CUTLASS_OFF_PATH}"
    if not gpus:
        return False, "no GPU visible"
    low, high = fa4_majors()
    outside = _first_outside(gpus, low, high)
    if outside:
        return False, f"{outside} and flash-attention 4 runs on sm{low}0 to sm{high}x here"
    return True, f"flash-attn-4 {version} is installed and every GPU is sm{low}0 to sm{high}x"


def fa2_status(gpus: list[tuple[int, int]]) -> tuple[bool, str]:
    """Whether flash-attention 2 can run on these GPUs (the package imports and every GPU is sm80+), and why."""
    if installed("flash-attn") is None:
        return False, "flash-attn 2 is not installed"
    if not gpus:
        return False, "no GPU visible"
    try:
        import flash_attn
    except Exception as error:  # built against another torch: an undefined symbol
        first = (str(error).splitlines() or [""])[0]
        return False, f"flash_attn does not import ({type(error).__name__}: {first})"
    outside = _first_outside(gpus, FA2_MIN_MAJOR, 99)
    if outside:
        return False, f"{outside} and flash-attn 2 needs sm80 or newer"
    return True, f"flash_attn {getattr(flash_attn, '__version__', '?')} imports and every GPU is sm80 or newer"


def _sdpa_reason(gpus, fa4: tuple[bool, str], fa2: tuple[bool, str]) -> str:
    if not gpus:
        return "no GPU visible"
    if installed("flash-attn-4") is not None:
        return fa4[1]
    if installed("flash-attn") is not None:
        return fa2[1]
    return "no flash-attention in this environment (flash-attn-4 or flash-attn)"


def choose_attention(requested: str, key: str = "key 'attn_implementation'") -> str:
    """The attention implementation to load the model with, said in one line; ConfigError for an explicit
    flash-attention choice that cannot run here."""
    if requested in ("sdpa", "eager"):
        log.info("attention: %s (requested)", requested)
        return requested
    gpus = gpu_capabilities()
    fa4, fa2 = fa4_status(gpus), fa2_status(gpus)
    if requested in ("auto", FA4) and fa4[0]:
        log.info("attention: %s (%s%s)", FA4, "requested; " if requested == FA4 else "", fa4[1])
        return FA4
    if requested in ("auto", FA2) and fa2[0]:
        log.info("attention: %s (%s%s)", FA2, "requested; " if requested == FA2 else "", fa2[1])
        return FA2
    if requested == FA2 and fa4[0]:  # VLM-R1's scripts ask for 2; the image carries 4 in its place
        log.warning("attention: %s, not the requested %s (%s; %s)", FA4, FA2, fa2[1], fa4[1])
        return FA4
    if requested in (FA4, FA2):
        why = fa4[1] if requested == FA4 else f"{fa2[1]}, and flash-attention 4 cannot stand in: {fa4[1]}"
        raise ConfigError(f"{key}: {requested} cannot run here ({why}); use auto (the best kernel this image and "
                          "GPU run, else sdpa) or sdpa")
    log.info("attention: sdpa (%s)", _sdpa_reason(gpus, fa4, fa2))
    return "sdpa"
