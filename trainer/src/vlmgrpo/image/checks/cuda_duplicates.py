"""audit.cuda_duplicates: which CUDA libraries the image carries twice, in the base image and in torch's nvidia-*
wheels, with their sizes. cuDNN twice fails: nothing in an image compiles against it, so the base's copy is only
weight (the bases are the -devel-/-runtime- tags, not -cudnn-). The toolkit's libraries beside torch's (cuBLAS,
cuFFT...) and the NCCL nvidia/cuda's -devel- and -runtime- tags install are listed and pass: they come with the
base nvcc is on, which flash-attn and DeepSpeed's ops compile with. A base without CUDA libraries is skipped by the
runner (NEEDS "base_cuda"). Needs no GPU."""

from __future__ import annotations

from typing import Iterable

from vlmgrpo.image.checks import FAIL, PASS, Context, result
from vlmgrpo.image.checks._needs import BASE_CUDA_DIRS, library_bytes, megabytes, wheel_library_dirs

NAMES = ("audit.cuda_duplicates",)
PHASE = "libraries"
NEEDS = ("base_cuda",)
# What torch's wheels bring, nothing in an image compiles against, and a base can leave out (its tag without cuDNN).
NEVER_TWICE = ("libcudnn",)


def duplicates_check(base_dirs: Iterable[str] = BASE_CUDA_DIRS) -> tuple[str, str]:
    base, wheels = library_bytes(base_dirs), library_bytes(wheel_library_dirs())  # base: some ("base_cuda" need)
    twice = sorted(set(base) & set(wheels), key=lambda name: -(base[name] + wheels[name]))
    if not twice:
        return PASS, f"no CUDA library twice: the base has {megabytes(sum(base.values()))}, the wheels " \
                     f"{megabytes(sum(wheels.values()))}"
    listed = "; ".join(f"{name} {megabytes(base[name])} in the base + {megabytes(wheels[name])} in a wheel"
                       for name in twice)
    total = sum(min(base[name], wheels[name]) for name in twice)
    needless = [name for name in twice if name.startswith(NEVER_TWICE)]
    if needless:
        return FAIL, (f"{', '.join(needless)} both in the base image and in torch's wheels, which torch loads: "
                      f"{megabytes(sum(base[name] for name in needless))} of the base's are never used; build on the "
                      f"base's tag without cuDNN (nvidia/cuda:X-devel-..., not -cudnn-devel-). "
                      f"All twice: {listed}")[:2000]
    return PASS, f"{len(twice)} CUDA libraries twice, at least {megabytes(total)} duplicated: {listed}"[:2000]


def run(context: Context) -> list[dict[str, str]]:
    return [result("audit.cuda_duplicates", *duplicates_check())]
