"""The GPU architectures a torch build runs on, as torch itself was compiled for them, and what an image claims.

A CUDA line's `archs` say which GPUs its images are for; a torch build runs only on what it was compiled for
(`torch.cuda.get_arch_list()`, read from the wheel by `imagegen facts check`). An image claims, checks (`cuda.archs`
inside it) and compiles its source builds for the CUDA line's archs that its torch build covers; validate warns
about the rest. Pure functions on the matrix.
"""

from __future__ import annotations

import re

from imagegen.core.errors import Problem
from imagegen.matrix.model import ImageEntry, Matrix
from imagegen.matrix.schema import TorchBuild

ARCH = re.compile(r"(\d+)\.(\d+)(a|f)?(\+PTX)?")  # "8.6", "9.0a", "12.0+PTX": the TORCH_CUDA_ARCH_LIST spelling
FLAG = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")  # sm_86, sm_90a, compute_120: torch's own spelling


def from_flags(flags: list[str]) -> tuple[str, ...]:
    """torch's arch flags ("sm_75 ... sm_120 compute_120") in the matrix's spelling ("7.5", ..., "12.0+PTX")."""
    binaries, ptx = [], set()
    for flag in flags:
        found = FLAG.fullmatch(flag)
        if not found:
            continue
        kind, major, minor, suffix = found.groups()
        arch = f"{int(major)}.{minor}{suffix}"
        (binaries.append(arch) if kind == "sm" else ptx.add(arch))
    listed = [arch + ("+PTX" if arch in ptx else "") for arch in binaries]
    listed += [arch + "+PTX" for arch in sorted(ptx - set(binaries), key=_key)]  # PTX alone (rare)
    return tuple(listed)


def covers(built: tuple[str, ...], arch: str) -> bool:
    """Whether a torch built for `built` runs on compute capability `arch`: a binary for X.Y runs on X.Z for Z >= Y
    (the same major), PTX for X.Y is compiled on the fly for X.Y and every later GPU. Arch-specific builds (9.0a)
    run on that GPU alone."""
    wanted = _key(arch)
    for listed in built:
        found = ARCH.fullmatch(listed)
        if not found:
            continue
        major, minor, specific, ptx = int(found[1]), int(found[2]), found[3], found[4]
        if ptx and (major, minor) <= wanted:
            return True
        if specific and (major, minor) == wanted:
            return True
        if not specific and major == wanted[0] and minor <= wanted[1]:
            return True
    return False


def claimed(matrix: Matrix, image: ImageEntry, build: TorchBuild | None, platform: str) -> tuple[str, ...]:
    """The archs an image is for on a platform: its CUDA line's, less those its torch build was not compiled for
    (all of them where the matrix does not say what the build was compiled for)."""
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    wanted = cuda.archs_by_platform.get(platform, ()) if cuda else ()
    built = build.archs_by_platform.get(platform) if build else None
    return wanted if built is None else tuple(arch for arch in wanted if covers(built, arch))


def warnings(matrix: Matrix, image: ImageEntry, build: TorchBuild | None) -> list[Problem]:
    """One warning per image whose CUDA line lists archs its torch build does not run on."""
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    if cuda is None or build is None:
        return []
    dropped = {platform: [arch for arch in cuda.archs_by_platform.get(platform, ())
                          if arch not in claimed(matrix, image, build, platform)] for platform in image.platforms}
    dropped = {platform: archs for platform, archs in dropped.items() if archs}
    if not dropped:
        return []
    said = "; ".join(f"{', '.join(archs)} on {platform} (built for {', '.join(build.archs_by_platform[platform])})"
                     for platform, archs in dropped.items())
    return [matrix.problem(("images", image.index, "torch"),
                           f"torch {image.torch}'s CUDA {build.cuda} build does not run on {said}: the image "
                           f"does not claim them (cuda.{image.cuda}.archs lists them)", "torch-archs")]


def _key(arch: str) -> tuple[int, int]:
    found = ARCH.fullmatch(arch)
    return (int(found[1]), int(found[2])) if found else (0, 0)
