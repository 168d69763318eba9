"""flash_attn_4.cache: the FlashAttention 4 kernels the image compiled at build (vlmgrpo/fa4kernels/build.py) are the
ones FA4 will find, without a GPU: its manifest is there, FA4's fingerprint computed from the installed files (its
sources, the Python minor, the cutlass and tvm_ffi versions: flash_attn/cute/cache_utils.py) is the one the kernels
were filed under, and every kernel and lock file the manifest lists is there for every GPU it lists. An edited FA4
file (a derived image that patches it) names itself. The build already replayed every case in a fresh process with
no compile; on a GPU, whether the first call loads is the trainer's start line (runtime.py) and the GPU script's.
"""

from __future__ import annotations

import os

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("flash_attn_4.cache",)
PHASE = "components"
NEEDS = ("flash_attn_4",)


def cache_check() -> tuple[str, str]:
    from vlmgrpo.fa4kernels.runtime import KERNELS_VARIABLE, changed_sources, kinds, manifest

    shipped = manifest()
    if shipped is None:
        where = os.environ.get(KERNELS_VARIABLE)
        return FAIL, (f"no kernel cache: {where}/manifest.json does not read" if where else
                      f"no kernel cache: {KERNELS_VARIABLE} is not set (an image built under emulation goes without; "
                      "every run compiles FA4's kernels at its first step)")
    changed = changed_sources(shipped)
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return FAIL, (f"{changed[0]}{more} differs from the source the image's kernels were compiled from: FA4 "
                      "files them under another fingerprint and will compile every kernel again")
    from flash_attn.cute.cache_utils import _compute_source_fingerprint

    fingerprint = _compute_source_fingerprint()
    if fingerprint != shipped["fingerprint"]:
        return FAIL, (f"FA4's fingerprint here is {fingerprint[:12]}, the kernels' {shipped['fingerprint'][:12]} "
                      f"(Python {shipped['python']} built them; cutlass or tvm_ffi changed since)")
    root = os.environ[KERNELS_VARIABLE]
    missing = [f"{gpu['directory']}/{path}" for gpu in shipped["gpus"].values() for path in gpu["files"]
               if not os.path.isfile(os.path.join(root, gpu["directory"], path))]
    if missing:
        return FAIL, f"{len(missing)} kernel files of the manifest are missing, the first {missing[0]}"
    count = sum(gpu["keys"] for gpu in shipped["gpus"].values())
    return PASS, (f"{count} kernels for {kinds(shipped)}, {len(shipped['cases'])} attention cases, under FA4's "
                  f"fingerprint {fingerprint[:12]}")


def run(context: Context) -> list[dict[str, str]]:
    return [result("flash_attn_4.cache", *cache_check())]
