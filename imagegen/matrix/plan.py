"""Resolve matrix entries into planned images: every version and base one platform of an image will have,
and what its lock must be resolved from. A planned image has no lock, no tags and no reference: those are
a LockedImage's (imagegen.render.locked). Beside its name, platforms, versions and component rows, a planned image
is a few parts, each with one job: its Base, its Gpu, its TorchWheels, its Kernels and its TrainerInstall.

Pure functions: a Matrix in, PlannedImages out. Nothing here touches Docker, the network or the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
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

    @property
    def cuda_requirements(self) -> tuple[Requirement, ...]:
        """Its CUDA_EXTRA: installed in images with CUDA only."""
        return tuple(self.extras.get(CUDA_EXTRA, ()))


@dataclass(frozen=True)
class Base:
    """What the image starts FROM, and what that base decides: its OS, its flavor, its cuDNN, its Python."""

    image: str  # the ref its Dockerfile starts FROM, as the matrix says it (the lock pins its digest)
    os: str
    flavor: str  # devel or runtime (nvidia/cuda's, or NVIDIA's wheels' on a base of its own); custom: no CUDA
    cudnn: int | None  # cuDNN major an nvidia/cuda base carries; None on any other base
    python_source: str  # "system" (the OS's Python is the image's) or "deadsnakes"
    python_platform: str  # what the lock is resolved for, e.g. x86_64-manylinux_2_35 (uv's spelling): the OS's glibc


@dataclass(frozen=True)
class Gpu:
    """The CUDA the image has, the driver it needs and the GPUs it must run on."""

    cuda: str | None  # its nvidia/cuda base's toolkit ("12.4.1"), or its line ("13.0") on wheels; None: no CUDA line
    # Where its CUDA comes from: "base" (FROM nvidia/cuda), "wheels" (NVIDIA's PyPI wheels on a base of its own,
    # imagegen.matrix.cuda_wheels), or None (no CUDA line: the libraries torch's wheels bring, if any)
    cuda_source: str | None
    # The driver its CUDA needs (imagegen.matrix.drivers): its CUDA line's, with the cuda-compat an nvidia/cuda base
    # carries, or, without a CUDA line, that of the CUDA torch's wheels bring; None: no CUDA at all
    driver: drivers.DriverRequirement | None
    archs: tuple[str, ...]  # compute capabilities the image must run on; torch's build must cover them

    @property
    def cuda_minor(self) -> str | None:
        return ".".join(self.cuda.split(".")[:2]) if self.cuda else None

    @property
    def min_driver(self) -> str | None:
        """The oldest driver it starts on with any GPU."""
        return self.driver.min_driver if self.driver else None


@dataclass(frozen=True)
class TorchWheels:
    """Where the image's torch build comes from, and the C++ ABI its wheels have."""

    index_url: str | None  # None: PyPI serves this very build
    cxx11_abi: bool
    lock_source: str  # "pypi", or "pytorch-index": locked only where the PyTorch index answers


@dataclass(frozen=True)
class Kernels:
    """The CUDA extensions the build brings: flash-attn (NVIDIA's prebuilt wheel, or compiled from source) and
    DeepSpeed's ops compiled ahead, and the architectures what is compiled targets."""

    source_builds: frozenset[str]  # artifact components compiled in the build (flash_attn)
    flash_attn_wheel_url: str | None
    flash_attn_requires: tuple[str, ...]
    flash_attn_cxx_standard: int  # the -std=c++NN its source build passes (the compile probe compiles with it)
    deepspeed_ops: tuple[str, ...]
    arch_list: str  # TORCH_CUDA_ARCH_LIST for anything compiled at build time

    @property
    def flash_attn_source_build(self) -> bool:
        return "flash_attn" in self.source_builds


@dataclass(frozen=True)
class TrainerInstall:
    """What the image installs of the trainer (Trainer): its version, and its requirements in two steps."""

    version: str
    requirements: tuple[str, ...]  # what the framework layer installs for the trainer
    # The distributions of the components that name a trainer extra and that extra's requirements (jupyterlab,
    # ipywidgets, ...): installed in a step of their own below the stack's, so that a change to one stack package
    # sends the stack's layer again, not theirs.
    extra_roots: tuple[str, ...]


# The plan as plain data (`imagegen matrix --format json`, a render's image.json): flat, each name the attribute of
# the plan it reads, in this order. Scripts read that JSON by these names, which the plan's fields had before they
# were grouped; the order is the one `--format json` has always printed.
PUBLISHED = {"name": "name", "platform": "platform", "platforms": "platforms", "versions": "versions",
             "flavor": "base.flavor", "base_image": "base.image", "os": "base.os", "cuda": "gpu.cuda",
             "cuda_source": "gpu.cuda_source", "base_cudnn": "base.cudnn", "driver": "gpu.driver",
             "python_source": "base.python_source", "python_platform": "base.python_platform",
             "torch_index_url": "torch.index_url", "cxx11_abi": "torch.cxx11_abi",
             "source_builds": "kernels.source_builds", "flash_attn_wheel_url": "kernels.flash_attn_wheel_url",
             "flash_attn_requires": "kernels.flash_attn_requires",
             "flash_attn_cxx_standard": "kernels.flash_attn_cxx_standard", "deepspeed_ops": "kernels.deepspeed_ops",
             "cuda_arch_list": "kernels.arch_list", "cuda_archs": "gpu.archs", "trainer_version": "trainer.version",
             "trainer_requirements": "trainer.requirements", "extra_roots": "trainer.extra_roots",
             "repository": "repository", "lock_source": "torch.lock_source", "max_size": "max_size"}


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
    base: Base
    gpu: Gpu
    torch: TorchWheels
    kernels: Kernels
    trainer: TrainerInstall
    repository: str
    max_size: int | None = None  # bytes; a larger image fails its build

    def version(self, key: str) -> str | None:
        return self.versions.get(key)

    @property
    def key(self) -> str:
        """The image and platform, as names of files and report rows: cpu, cpu-arm64."""
        return platforms.key(self.name, self.platform)

    @property
    def has_toolkit(self) -> bool:
        """Whether the image carries a CUDA toolkit (nvcc): a devel image, on nvidia/cuda or on NVIDIA's wheels."""
        return self.gpu.cuda is not None and self.base.flavor == "devel"

    @property
    def compiles_kernels(self) -> tuple[str, ...]:
        """What compiles CUDA kernels with nvcc, which needs a host C++ compiler: flash-attn built from source (at
        build time), DeepSpeed's ops and vLLM's FlashInfer (when first used, just in time)."""
        return tuple(what for what, present in (("flash-attn", self.kernels.flash_attn_source_build),
                                                ("DeepSpeed", bool(self.version("deepspeed"))),
                                                ("vLLM's FlashInfer", bool(self.version("vllm")))) if present)

    def as_dict(self) -> dict:
        """The plan as plain data, as PUBLISHED names it (its component rows left out: they are the matrix's
        table's)."""
        data = {name: attrgetter(attribute)(self) for name, attribute in PUBLISHED.items()}
        return {**data, "versions": dict(self.versions), "source_builds": sorted(self.kernels.source_builds),
                "driver": self.gpu.driver.as_dict() if self.gpu.driver else None}


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
    archs = torch_archs.claimed(matrix, image, torch.builds.get(torch_cuda), platform)
    extras = _extras_of(matrix.components, image.versions)
    versions = image_versions(matrix, image)
    return PlannedImage(
        name=image.name,
        platform=platform,
        platforms=image.platforms,
        versions=versions,
        components=matrix.components.only(versions),
        base=_base(matrix, image, cuda, wheels, platform),
        gpu=Gpu(cuda=(cuda.minor if wheels else cuda.version) if cuda else None,
                cuda_source=("wheels" if wheels else "base") if cuda else None,
                driver=_driver(matrix, cuda, torch_cuda, wheels), archs=archs),
        # PyPI serves one CUDA build of each release: the same wheels, without the index's +cuXYZ.
        torch=TorchWheels(
            index_url=None if torch_cuda == torch.pypi_build else TORCH_INDEX.format(nodot=_nodot(torch_cuda)),
            cxx11_abi=torch.builds[torch_cuda].cxx11_abi, lock_source=image.lock_source),
        kernels=_kernels(matrix, image, torch_cuda, archs),
        trainer=TrainerInstall(version=trainer.version,
                               requirements=_trainer_requirements(matrix.components, trainer,
                                                                  with_cuda=cuda is not None, extras=extras),
                               extra_roots=_extra_roots(matrix.components, trainer, extras)),
        repository=matrix.repository,
        max_size=sizes.parse(image.max_size) if image.max_size else None,
    )


def _base(matrix: Matrix, image: ImageEntry, cuda: CudaFacts | None, wheels: bool, platform: str) -> Base:
    """An nvidia/cuda base decides the OS and the cuDNN; NVIDIA's wheels and an image without CUDA take the image's."""
    os_name = cuda.os if cuda and not wheels else image.os
    return Base(image=base_of(matrix, image)[0], os=os_name, flavor=image.flavor if cuda else "custom",
                cudnn=cuda.cudnn if cuda and not wheels else None,
                python_source="system" if matrix.os[os_name].python == image.python else "deadsnakes",
                python_platform=f"{platforms.MACHINE[platform]}-manylinux_{matrix.os[os_name].glibc.replace('.', '_')}")


def _kernels(matrix: Matrix, image: ImageEntry, torch_cuda: str, archs: tuple[str, ...]) -> Kernels:
    flash_attn = matrix.flash_attn.get(image.versions.get("flash_attn") or "")
    return Kernels(source_builds=image.source_builds,
                   flash_attn_wheel_url=_flash_attn_wheel(matrix, image, torch_cuda),
                   flash_attn_requires=tuple(flash_attn.requires) if flash_attn else (),
                   flash_attn_cxx_standard=flash_attn.cxx_standard if flash_attn else CXX_STANDARD,
                   deepspeed_ops=image.deepspeed_ops,
                   arch_list=_arch_list(archs, "flash_attn" in image.source_builds))


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
