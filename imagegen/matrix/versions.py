"""The versions an image has: its own, and those its torch build decides (torch_cuda, cuDNN, NCCL, torchvision).

One place for both the rules (known-bad ranges) and the planned image (labels, tags, the version checks).
"""

from __future__ import annotations

from imagegen.matrix.components import TORCH
from imagegen.matrix.model import ImageEntry, Matrix
from imagegen.matrix.schema import TorchBuild


def image_versions(matrix: Matrix, image: ImageEntry) -> dict[str, str | None]:
    """The version of each component the image has, in the table's order: what its torch build decides for the
    components `from: torch` (None where its facts are missing, which other rules report), and the image's own
    (`none` included). A component the image never names is not among them."""
    torch = matrix.torch.get(image.torch)
    build = torch_build(matrix, image)
    decided = {"torch_cuda": build.cuda, "cudnn": build.cudnn, "nccl": build.nccl} if build else {}
    decided["torchvision"] = torch.torchvision if torch else None
    return {c.key: decided.get(c.key) if c.source == TORCH else image.versions.get(c.key)
            for c in matrix.components if c.source == TORCH or c.key in image.versions}


def torch_build(matrix: Matrix, image: ImageEntry) -> TorchBuild | None:
    """The torch build the image installs, None when its facts are missing (reported elsewhere)."""
    torch = matrix.torch.get(image.torch)
    cuda = torch_cuda(matrix, image) if torch else None
    return torch.builds.get(cuda) if torch and cuda else None


def torch_cuda(matrix: Matrix, image: ImageEntry) -> str | None:
    """The CUDA version torch was built for: what torch.version.cuda reports."""
    torch = matrix.torch[image.torch]
    if image.torch_build == "pypi":
        return torch.pypi_build
    return image.torch_build or image.cuda
