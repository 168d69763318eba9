"""Resolve matrix entries into planned images: every version and base one platform of an image will have,
and what its lock must be resolved from. A planned image has no lock, no tags and no reference: those are
a LockedImage's (imagegen.render.locked).

Pure functions: a Matrix in, PlannedImages out. Nothing here touches Docker, the network or the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagegen.core import platforms, sizes
from imagegen.core.errors import MatrixError, UserError
from imagegen.matrix import cuda_wheels, drivers, rules, torch_archs
from imagegen.matrix.versions import image_versions, torch_cuda as torch_cuda_of
from imagegen.matrix.components import Components
from imagegen.matrix.model import ImageEntry, Matrix
from imagegen.matrix.schema import CXX_STANDARD, CudaFacts

PYPI = "https://pypi.org/simple"
TORCH_INDEX = "https://download.pytorch.org/whl/cu{nodot}"
FLASH_ATTN_WHEEL = ("https://github.com/Dao-AILab/flash-attention/releases/download/v{version}/"
                    "flash_attn-{version}+cu{cu}torch{torch}cxx11abi{abi}-cp{py}-cp{py}-linux_x86_64.whl")
FLASH_ATTN_MIN_ARCH = (8, 0)  # flash-attn 2 runs on Ampere and newer
# The trainer's extra for QLoRA: bitsandbytes' 4-bit layers need a CUDA GPU, so an image without
# CUDA leaves it out.
CUDA_EXTRA = "qlora"


@dataclass(frozen=True)
class Trainer:
    """The trainer distribution baked into every image."""

    version: str
    requirements: tuple[Requirement, ...] = ()
    build_requirements: tuple[Requirement, ...] = ()
    # Every extra by name: an image installs those its components name (a component row's trainer_extra), and
    # CUDA_EXTRA where it has CUDA.
    extras: Mapping[str, tuple[Requirement, ...]] = field(default_factory=dict)
    # Where setuptools finds its packages ([tool.setuptools.packages.find] where), relative to its folder: where
    # imagegen looks for the modules it reads from the trainer source (the inventory program).
    package_folders: tuple[str, ...] = ("src", ".")

    @property
    def cuda_requirements(self) -> tuple[Requirement, ...]:
        """Its CUDA_EXTRA: installed in images with CUDA only."""
        return tuple(self.extras.get(CUDA_EXTRA, ()))


@dataclass(frozen=True)
class PlannedImage:
    """One platform of one image, as the matrix says it (an image of two platforms plans two)."""

    name: str  # the image's name in the matrix
    platform: str  # linux/amd64
    platforms: tuple[str, ...]  # every platform of the image, this one among them
    # every component the image names (its own, the defaults, torch's) by key, in the table's order; None: `none`
    versions: Mapping[str, str | None]
    # The rows of the component table the image names (the keys of `versions`): what its labels, description and
    # expected.json hold. One it never names is left out, so adding it to other images changes nothing here; the
    # whole table is the matrix's (Matrix.components).
    components: Components
    flavor: str
    base_image: str
    os: str
    cuda: str | None  # CUDA of the image: its nvidia/cuda base's toolkit ("12.4.1"), or its line ("13.0") on wheels
    # Where its CUDA comes from: "base" (FROM nvidia/cuda), "wheels" (NVIDIA's PyPI wheels on a base of its own,
    # imagegen.matrix.cuda_wheels), or None (no CUDA line: the libraries torch's wheels bring, if any)
    cuda_source: str | None
    base_cudnn: int | None  # cuDNN major of the base image
    # The driver its CUDA needs (imagegen.matrix.drivers): its CUDA line's, with the cuda-compat an nvidia/cuda base
    # carries, or, without a CUDA line, that of the CUDA torch's wheels bring; None: no CUDA at all
    driver: drivers.DriverRequirement | None
    python_source: str  # "system" or "deadsnakes"
    python_platform: str  # what the lock is resolved for, e.g. x86_64-manylinux_2_35 (uv's spelling)
    torch_index_url: str | None  # None: PyPI serves this very build
    cxx11_abi: bool  # of this torch build's wheels
    source_builds: frozenset[str]  # artifact components compiled in the build (flash-attn)
    flash_attn_wheel_url: str | None
    flash_attn_requires: tuple[str, ...]
    flash_attn_cxx_standard: int  # the -std=c++NN its source build passes (the compile probe compiles with it)
    deepspeed_ops: tuple[str, ...]
    cuda_arch_list: str  # TORCH_CUDA_ARCH_LIST for anything compiled at build time
    cuda_archs: tuple[str, ...]  # compute capabilities the image must run on; torch's build must cover them
    trainer_version: str
    trainer_requirements: tuple[str, ...]  # what the framework layer installs for the trainer
    # The distributions of the components that name a trainer extra and that extra's requirements (jupyterlab,
    # ipywidgets, ...): installed in a step of their own below the stack's, so that a change to one stack package
    # sends the stack's layer again, not theirs.
    extra_roots: tuple[str, ...]
    repository: str
    lock_source: str  # "pypi", or "pytorch-index": locked only where the PyTorch index answers
    max_size: int | None = None  # bytes; a larger image fails its build

    def version(self, key: str) -> str | None:
        return self.versions.get(key)

    @property
    def key(self) -> str:
        """The image and platform, as names of files and report rows: cpu, cpu-arm64."""
        return platforms.key(self.name, self.platform)

    @property
    def cuda_minor(self) -> str | None:
        return ".".join(self.cuda.split(".")[:2]) if self.cuda else None

    @property
    def min_driver(self) -> str | None:
        """The oldest driver it starts on with any GPU."""
        return self.driver.min_driver if self.driver else None

    @property
    def has_toolkit(self) -> bool:
        """Whether the image carries a CUDA toolkit (nvcc): a devel image, on nvidia/cuda or on NVIDIA's wheels."""
        return self.cuda is not None and self.flavor == "devel"

    @property
    def flash_attn_source_build(self) -> bool:
        return "flash_attn" in self.source_builds

    @property
    def compiles_kernels(self) -> tuple[str, ...]:
        """What compiles CUDA kernels with nvcc, which needs a host C++ compiler: flash-attn built from source (at
        build time), DeepSpeed's ops and vLLM's FlashInfer (when first used, just in time)."""
        return tuple(what for what, present in (("flash-attn", self.flash_attn_source_build),
                                                ("DeepSpeed", bool(self.version("deepspeed"))),
                                                ("vLLM's FlashInfer", bool(self.version("vllm")))) if present)

    def as_dict(self) -> dict:
        """The plan as plain data (its component rows left out: they are the matrix's table's)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "components"}
        return {**fields, "versions": dict(self.versions), "source_builds": sorted(self.source_builds),
                "driver": self.driver.as_dict() if self.driver else None}


def resolve(matrix: Matrix, trainer: Trainer) -> list[PlannedImage]:
    """Every platform of every image of the matrix, or MatrixError listing every problem found."""
    problems = rules.check(matrix, trainer.requirements)
    if problems:
        raise MatrixError(problems)
    return [_plan(matrix, image, trainer, platform) for image in matrix.images for platform in image.platforms]


def base_of(matrix: Matrix, image: ImageEntry) -> tuple[str, tuple]:
    """The base an image's Dockerfile starts FROM, and where the matrix sets it (for problems that point there)."""
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    if cuda and not cuda_wheels.from_wheels(image):
        kind = "devel" if image.flavor == "devel" else "runtime"
        return (cuda.base.devel if kind == "devel" else cuda.base.runtime), ("cuda", image.cuda, "base", kind)
    return image.base, ("images", image.index, "base")


def _plan(matrix: Matrix, image: ImageEntry, trainer: Trainer, platform: str) -> PlannedImage:
    torch = matrix.torch[image.torch]
    torch_cuda = torch_cuda_of(matrix, image)
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    wheels = cuda_wheels.from_wheels(image)
    os_name = cuda.os if cuda and not wheels else image.os
    archs = torch_archs.claimed(matrix, image, torch.builds.get(torch_cuda), platform)
    flash_attn = matrix.flash_attn.get(image.versions.get("flash_attn") or "")
    extras = _extras_of(matrix.components, image.versions)
    versions = image_versions(matrix, image)
    return PlannedImage(
        name=image.name,
        platform=platform,
        platforms=image.platforms,
        versions=versions,
        components=matrix.components.only(versions),
        flavor=image.flavor if cuda else "custom",
        base_image=base_of(matrix, image)[0],
        os=os_name,
        cuda=(cuda.minor if wheels else cuda.version) if cuda else None,
        cuda_source=("wheels" if wheels else "base") if cuda else None,
        base_cudnn=cuda.cudnn if cuda and not wheels else None,
        driver=_driver(matrix, cuda, torch_cuda, wheels),
        python_source="system" if matrix.os[os_name].python == image.python else "deadsnakes",
        python_platform=f"{platforms.MACHINE[platform]}-manylinux_{matrix.os[os_name].glibc.replace('.', '_')}",
        # PyPI serves one CUDA build of each release: the same wheels, without the index's +cuXYZ.
        torch_index_url=None if torch_cuda == torch.pypi_build else TORCH_INDEX.format(nodot=_nodot(torch_cuda)),
        cxx11_abi=torch.builds[torch_cuda].cxx11_abi,
        source_builds=image.source_builds,
        flash_attn_wheel_url=_flash_attn_wheel(matrix, image, torch_cuda),
        flash_attn_requires=tuple(flash_attn.requires) if flash_attn else (),
        flash_attn_cxx_standard=flash_attn.cxx_standard if flash_attn else CXX_STANDARD,
        deepspeed_ops=image.deepspeed_ops,
        cuda_arch_list=_arch_list(archs, "flash_attn" in image.source_builds),
        cuda_archs=archs,
        trainer_version=trainer.version,
        trainer_requirements=_trainer_requirements(matrix.components, trainer, with_cuda=cuda is not None,
                                                   extras=extras),
        extra_roots=_extra_roots(matrix.components, trainer, extras),
        repository=matrix.repository,
        lock_source=image.lock_source,
        max_size=sizes.parse(image.max_size) if image.max_size else None,
    )


def _extras_of(table: Components, versions_of: Mapping[str, str | None]) -> dict[str, str]:
    """Component key -> the trainer extra it names, for the components the image has (a version, not none)."""
    return {c.key: c.trainer_extra for c in table if c.trainer_extra and versions_of.get(c.key)}


def _extra_roots(table: Components, trainer: Trainer, extras: Mapping[str, str]) -> tuple[str, ...]:
    """The distributions of the image's components that name a trainer extra (extras: _extras_of), and those the
    extra requires."""
    roots = []
    for key, extra in extras.items():
        roots += [table[key].distribution or key, *(r.name for r in trainer.extras.get(extra, ()))]
    return tuple(dict.fromkeys(roots))


def _trainer_requirements(table: Components, trainer: Trainer, with_cuda: bool,
                          extras: Mapping[str, str]) -> tuple[str, ...]:
    """The trainer's dependencies and build tools (its CUDA extra in an image with CUDA, and the extras its
    components name), less the packages every image pins itself.

    The framework layer installs them, so the trainer layer installs the trainer alone,
    offline, and a change to the trainer's code rebuilds nothing below it.
    """
    pinned = {canonicalize_name(name) for name in table.distributions.values()}
    wanted = [*trainer.requirements, *trainer.build_requirements, *(trainer.cuda_requirements if with_cuda else ())]
    for key, extra in extras.items():
        if extra not in trainer.extras:
            raise UserError(f"matrix.yaml: components.{key}.trainer_extra: the trainer has no extra {extra!r}; add it "
                            "to [project.optional-dependencies] of the trainer's pyproject.toml, or fix the row")
        wanted += trainer.extras[extra]
    return tuple(sorted({str(r) for r in wanted if canonicalize_name(r.name) not in pinned}))


def _driver(matrix: Matrix, base: CudaFacts | None, torch_cuda: str | None,
            wheels: bool) -> drivers.DriverRequirement | None:
    """The driver the image's CUDA needs: its CUDA line's (with cuda-compat on an nvidia/cuda base, without on NVIDIA's
    wheels), or, without a CUDA line, that of the CUDA torch's wheels carry (PyPI's torch is a CUDA build whose
    libraries are wheels: the `cpu` image's), which brings no cuda-compat either."""
    if base is not None:
        return drivers.requirement(matrix, base.minor, compat=not wheels)
    carried = matrix.cuda.get(torch_cuda or "")
    return drivers.requirement(matrix, carried.minor, compat=False) if carried else None


def _flash_attn_wheel(matrix: Matrix, image: ImageEntry, torch_cuda: str) -> str | None:
    version = image.versions.get("flash_attn")
    if version is None or "flash_attn" in image.source_builds:
        return None
    release = matrix.flash_attn[version]
    torch = matrix.torch[image.torch]
    return FLASH_ATTN_WHEEL.format(
        version=version, cu=release.cuda[torch_cuda.split(".")[0]],
        torch=".".join(torch.version.split(".")[:2]), abi="TRUE" if torch.builds[torch_cuda].cxx11_abi else "FALSE",
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


def index_of(matrix: Matrix, name: str) -> int:
    return next(image.index for image in matrix.images if image.name == name)
