"""Resolve matrix entries into image specs: every version, base and tag an image will have.

Pure functions: a Matrix in, ImageSpecs out. Nothing here touches Docker or the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from . import rules, sizes, tags
from .errors import MatrixError
from .matrix import ImageEntry, Matrix

TORCH_INDEX = "https://download.pytorch.org/whl/cu{nodot}"
FLASH_ATTN_WHEEL = ("https://github.com/Dao-AILab/flash-attention/releases/download/v{version}/"
                    "flash_attn-{version}+cu{cu}torch{torch}cxx11abi{abi}-cp{py}-cp{py}-linux_x86_64.whl")
FLASH_ATTN_MIN_ARCH = (8, 0)  # flash-attn 2 runs on Ampere and newer


@dataclass(frozen=True)
class Trainer:
    """The trainer distribution baked into every image."""

    version: str
    requirements: tuple[Requirement, ...] = ()
    build_requirements: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class ImageSpec:
    """One image to build, fully resolved: what is inside and what it is called."""

    name: str
    flavor: str
    base_image: str
    os: str
    cuda: str | None  # CUDA toolkit of the base image, e.g. "12.4.1"; None without one
    base_cudnn: int | None  # cuDNN major of the base image
    min_driver: str | None
    python: str
    python_source: str  # "system" or "deadsnakes"
    torch: str
    torch_cuda: str  # the CUDA torch was built for, as torch.version.cuda reports it
    torch_index_url: str | None  # None: PyPI
    torchvision: str
    cudnn: str  # pinned by the torch wheels; torch.backends.cudnn.version() reports it
    nccl: str
    cxx11_abi: bool
    flash_attn: str | None
    flash_attn_source_build: bool
    flash_attn_wheel_url: str | None
    deepspeed: str | None
    deepspeed_ops: tuple[str, ...]
    cuda_arch_list: str  # TORCH_CUDA_ARCH_LIST for anything compiled at build time
    transformers: str
    trl: str
    accelerate: str
    peft: str
    trainer_version: str
    trainer_requirements: tuple[str, ...]  # what the framework layer installs for the trainer
    repository: str
    version_tag: str = ""
    alias_tags: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    max_size: int | None = None  # bytes; a larger image fails its build
    cuda_archs: tuple[str, ...] = ()  # compute capabilities the image must run on; torch's build must cover them

    @property
    def cudnn_major(self) -> str:
        return self.cudnn.split(".")[0]

    @property
    def cuda_minor(self) -> str | None:
        return ".".join(self.cuda.split(".")[:2]) if self.cuda else None

    def ref(self, tag: str | None = None) -> str:
        return f"{self.repository}:{tag or self.version_tag}"

    def expected_versions(self) -> dict[str, object]:
        """What the selftest inside the image must find: the contract with vlmgrpo selftest."""
        return {
            "python": self.python, "torch": self.torch, "torch_cuda": self.torch_cuda,
            "cudnn": self.cudnn, "nccl": self.nccl, "torchvision": self.torchvision,
            "flash_attn": self.flash_attn, "deepspeed": self.deepspeed,
            "transformers": self.transformers, "trl": self.trl, "accelerate": self.accelerate,
            "peft": self.peft, "gpu_count": None,
            "cuda_archs": list(self.cuda_archs), "min_driver": self.min_driver,
        }


def resolve(matrix: Matrix, trainer: Trainer) -> list[ImageSpec]:
    """Every image of the matrix, or MatrixError listing every problem found."""
    problems = rules.check(matrix, trainer.requirements)
    if problems:
        raise MatrixError(problems)
    specs = [_resolve_image(matrix, image, trainer) for image in matrix.images]
    named = tags.assign(specs, matrix.latest)
    duplicates = tags.duplicate_tags(named)
    if duplicates:
        raise MatrixError([matrix.problem(("images", _index(matrix, name), "name"),
                                          f"tag {tag!r} is also the tag of {other!r}; change a version "
                                          "or the flavor so that tags differ", "unique-tag")
                           for tag, name, other in duplicates])
    return [replace(spec, labels=tags.labels(spec)) for spec in named]


def _index(matrix: Matrix, name: str) -> int:
    return next(image.index for image in matrix.images if image.name == name)


def _resolve_image(matrix: Matrix, image: ImageEntry, trainer: Trainer) -> ImageSpec:
    torch = matrix.torch[image.torch]
    torch_cuda = rules.torch_cuda(matrix, image)
    build = torch.builds[torch_cuda]
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    os_name = cuda.os if cuda else image.os
    archs = cuda.archs if cuda else ()
    return ImageSpec(
        name=image.name,
        flavor=image.flavor if cuda else "custom",
        base_image=(cuda.base_devel if image.flavor == "devel" else cuda.base_runtime) if cuda else image.base,
        os=os_name,
        cuda=cuda.version if cuda else None,
        base_cudnn=cuda.cudnn if cuda else None,
        min_driver=cuda.driver_minimum if cuda else None,
        python=image.python,
        python_source="system" if matrix.os[os_name].python == image.python else "deadsnakes",
        torch=torch.version,
        torch_cuda=torch_cuda,
        torch_index_url=None if image.torch_build == "pypi" else TORCH_INDEX.format(nodot=_nodot(torch_cuda)),
        torchvision=torch.torchvision,
        cudnn=build.cudnn,
        nccl=build.nccl,
        cxx11_abi=torch.cxx11_abi,
        flash_attn=image.flash_attn.version,
        flash_attn_source_build=image.flash_attn.source_build,
        flash_attn_wheel_url=_flash_attn_wheel(matrix, image, torch_cuda),
        deepspeed=image.deepspeed,
        deepspeed_ops=image.deepspeed_ops,
        cuda_arch_list=_arch_list(archs, image.flash_attn.source_build),
        transformers=image.transformers,
        trl=image.trl,
        accelerate=image.accelerate,
        peft=image.peft,
        trainer_version=trainer.version,
        trainer_requirements=_trainer_requirements(trainer),
        repository=matrix.repository,
        max_size=sizes.parse(image.max_size) if image.max_size else None,
        cuda_archs=archs,
    )


def _trainer_requirements(trainer: Trainer) -> tuple[str, ...]:
    """The trainer's dependencies and build tools, less the packages every image pins itself.

    The framework layer installs them, so the trainer layer installs the trainer alone,
    offline, and a change to the trainer's code rebuilds nothing below it.
    """
    pinned = {"torch", "torchvision", "transformers", "trl", "accelerate", "peft", "deepspeed", "flash-attn"}
    wanted = [*trainer.requirements, *trainer.build_requirements]
    return tuple(sorted({str(r) for r in wanted if canonicalize_name(r.name) not in pinned}))


def _flash_attn_wheel(matrix: Matrix, image: ImageEntry, torch_cuda: str) -> str | None:
    choice = image.flash_attn
    if choice.version is None or choice.source_build:
        return None
    release = matrix.flash_attn[choice.version]
    torch = matrix.torch[image.torch]
    return FLASH_ATTN_WHEEL.format(
        version=choice.version, cu=release.cuda[torch_cuda.split(".")[0]],
        torch=".".join(torch.version.split(".")[:2]), abi="TRUE" if torch.cxx11_abi else "FALSE",
        py="3" + image.python.split(".")[1])


def _arch_list(archs: tuple[str, ...], flash_attn_source: bool) -> str:
    """Compute capabilities to compile for; flash-attn skips pre-Ampere, the newest gets PTX."""
    chosen = [a for a in archs if not flash_attn_source or _arch(a) >= FLASH_ATTN_MIN_ARCH]
    if not chosen:
        return ""
    return ";".join(chosen[:-1] + [chosen[-1] + "+PTX"])


def _arch(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def _nodot(version: str) -> str:
    return version.replace(".", "")
