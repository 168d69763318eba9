"""Rules for what an image compiles from source against its torch: a build that cannot compile is refused by
`imagegen validate` instead of failing inside `docker build`, after the user has waited for it.

Pure functions on the matrix; each problem names the file, line and key.
"""

from __future__ import annotations

from imagegen.core.errors import Problem
from imagegen.matrix.model import ImageEntry, Matrix


def check_cxx_standard(matrix: Matrix, image: ImageEntry) -> list[Problem]:
    """flash-attn built from source compiles torch's headers with its own -std=c++NN: older than what those headers
    require (torch 2.14's ATen/ATen.h: `#error C++20 or later compatible compiler is required`), it cannot compile."""
    version = image.versions.get("flash_attn")
    release = matrix.flash_attn.get(version or "")
    torch = matrix.torch.get(image.torch)
    if "flash_attn" not in image.source_builds or release is None or torch is None:
        return []
    if release.cxx_standard >= torch.cxx_standard:
        return []
    return [matrix.problem(("images", image.index, "flash_attn"),
                           f"flash-attn {version} builds with -std=c++{release.cxx_standard}; torch {torch.version}'s "
                           f"headers need C++{torch.cxx_standard}, so its source build cannot compile: use "
                           "flash_attn: none (SDPA), a release that builds with C++"
                           f"{torch.cxx_standard}, or a torch whose headers take C++{release.cxx_standard}",
                           "flash-attn-cxx-standard")]
