"""Resolve matrix entries into image specs: every version and base an image will have, and what
its lock must be resolved from. Locks and tags come later (workspace.load): a spec here holds the
matrix's facts; `with_lock` replaces the typed cuDNN and NCCL with what the lock pins.

Pure functions: a Matrix in, ImageSpecs out. Nothing here touches Docker or the disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagegen.core import platforms, sizes
from imagegen.matrix import rules
from imagegen.matrix.components import COMPONENTS, PINNED_DISTRIBUTIONS
from imagegen.core.errors import MatrixError, Problem
from imagegen.locking.lockfile import BUILD_TOOLS, INSTALLER, Lock
from imagegen.matrix.model import ImageEntry, Matrix

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
    cuda_requirements: tuple[Requirement, ...] = ()  # its CUDA_EXTRA: installed in images with CUDA only


@dataclass(frozen=True)
class ImageSpec:
    """One image to build, fully resolved: what is inside and what it is called."""

    name: str
    platform: str  # linux/amd64: one spec per platform of an image
    platforms: tuple[str, ...]  # every platform of the image, this one among them
    flavor: str
    base_image: str
    os: str
    cuda: str | None  # CUDA toolkit of the base image, e.g. "12.4.1"; None without one
    base_cudnn: int | None  # cuDNN major of the base image
    min_driver: str | None
    python: str
    python_source: str  # "system" or "deadsnakes"
    python_platform: str  # what the lock is resolved for, e.g. x86_64-manylinux_2_35 (uv's spelling)
    torch: str
    torch_cuda: str  # the CUDA torch was built for, as torch.version.cuda reports it
    torch_index_url: str | None  # None: PyPI serves this very build
    torchvision: str
    cudnn: str  # pinned by the torch wheels; torch.backends.cudnn.version() reports it
    nccl: str
    cxx11_abi: bool  # of this torch build's wheels
    flash_attn: str | None
    flash_attn_source_build: bool
    flash_attn_wheel_url: str | None
    flash_attn_requires: tuple[str, ...]
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
    lock: Lock | None = field(default=None, repr=False, compare=False)
    lock_problem: str | None = None  # why the image has no usable lock: missing or stale
    inputs_digest: str | None = None  # sha256 of everything it is built from; None without a lock
    version_tag: str | None = None  # None without a lock: the tag carries the inputs digest
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

    @property
    def key(self) -> str:
        return platforms.key(self.name, self.platform)

    def ref(self, tag: str | None = None) -> str:
        """This platform's image, locally: cpu's linux/arm64 image is REPOSITORY:TAG-arm64."""
        return f"{self.repository}:{tag or self.version_tag}{platforms.suffix(self.platform)}"

    def as_dict(self) -> dict:
        """The spec as plain data, the lock left out (it lives in its own file)."""
        return asdict(replace(self, lock=None))

    def versions(self) -> dict[str, str | None]:
        """Every component's version, by component key; None for one the image leaves out."""
        return {c.key: getattr(self, c.key) for c in COMPONENTS}

    def expected(self) -> dict[str, object]:
        """What `vlmgrpo selftest` must find inside (expected.json): each component's version and the
        distribution it is read from, so that the image's own checks follow the component table."""
        return {
            "versions": self.versions(),
            "distributions": {c.key: c.distribution for c in COMPONENTS if c.distribution},
            "gpu_count": None,
            "cuda_archs": list(self.cuda_archs),
            "min_driver": self.min_driver,
        }


def resolve(matrix: Matrix, trainer: Trainer) -> list[ImageSpec]:
    """Every image of the matrix, or MatrixError listing every problem found."""
    problems = rules.check(matrix, trainer.requirements)
    if problems:
        raise MatrixError(problems)
    return [_resolve_image(matrix, image, trainer, platform) for image in matrix.images
            for platform in image.platforms]


def with_lock(spec: ImageSpec, lock: Lock) -> ImageSpec:
    """The spec with what its (current) lock pins: torch's cuDNN and NCCL wheels."""
    locked = {c.key: lock.family_version(c.lock_family) for c in COMPONENTS if c.lock_family}
    return replace(spec, lock=lock, lock_problem=None, **{k: v for k, v in locked.items() if v})


def lock_inputs(spec: ImageSpec) -> dict:
    """What the image's lock is resolved from; a lock made from other inputs is stale."""
    flash_attn = None
    if spec.flash_attn:
        flash_attn = {"version": spec.flash_attn, "build": "source" if spec.flash_attn_source_build else "wheel",
                      "requirement": flash_attn_requirement(spec), "requires": list(spec.flash_attn_requires)}
    return {
        "python": spec.python,
        "platform": spec.python_platform,
        "torch_index": spec.torch_index_url,
        "requirements": list(resolution_requirements(spec)),
        "flash_attn": flash_attn,
        "base": spec.base_image,
    }


def resolution_requirements(spec: ImageSpec) -> tuple[str, ...]:
    """Everything the lock resolves: the image's pins, the trainer's needs, what flash-attn needs
    (flash-attn itself has no resolvable metadata: its lock entry is an artifact), build tools and
    the installer."""
    local = f"+cu{_nodot(spec.torch_cuda)}" if spec.torch_index_url else ""
    pins = {c.distribution: getattr(spec, c.key) for c in PINNED_DISTRIBUTIONS if c.in_resolution}
    pins["torch"] = spec.torch + local
    pins["torchvision"] = spec.torchvision + local
    wanted = [f"{name}=={version}" for name, version in pins.items() if version]
    wanted += [*spec.trainer_requirements, *spec.flash_attn_requires, INSTALLER]
    if spec.deepspeed or spec.flash_attn_source_build:
        wanted += BUILD_TOOLS
    return tuple(sorted(set(wanted), key=str.lower))


def flash_attn_requirement(spec: ImageSpec) -> str | None:
    """flash-attn as pip installs it: the prebuilt wheel's URL, or the sdist to compile."""
    if not spec.flash_attn:
        return None
    if spec.flash_attn_source_build:
        return f"flash-attn=={spec.flash_attn}"
    return f"flash-attn @ {spec.flash_attn_wheel_url}"


def _resolve_image(matrix: Matrix, image: ImageEntry, trainer: Trainer, platform: str) -> ImageSpec:
    torch = matrix.torch[image.torch]
    torch_cuda = rules.torch_cuda(matrix, image)
    build = torch.builds[torch_cuda]
    cuda = matrix.cuda.get(image.cuda) if image.cuda else None
    os_name = cuda.os if cuda else image.os
    archs = cuda.archs.get(platform, ()) if cuda else ()
    flash_attn = matrix.flash_attn.get(image.flash_attn.version or "")
    return ImageSpec(
        name=image.name,
        platform=platform,
        platforms=image.platforms,
        flavor=image.flavor if cuda else "custom",
        base_image=(cuda.base_devel if image.flavor == "devel" else cuda.base_runtime) if cuda else image.base,
        os=os_name,
        cuda=cuda.version if cuda else None,
        base_cudnn=cuda.cudnn if cuda else None,
        min_driver=cuda.driver_minimum if cuda else None,
        python=image.python,
        python_source="system" if matrix.os[os_name].python == image.python else "deadsnakes",
        python_platform=f"{platforms.MACHINE[platform]}-manylinux_{matrix.os[os_name].glibc.replace('.', '_')}",
        torch=torch.version,
        torch_cuda=torch_cuda,
        # PyPI serves one CUDA build of each release: the same wheels, without the index's +cuXYZ.
        torch_index_url=None if torch_cuda == torch.pypi_build else TORCH_INDEX.format(nodot=_nodot(torch_cuda)),
        torchvision=torch.torchvision,
        cudnn=build.cudnn,
        nccl=build.nccl,
        cxx11_abi=build.cxx11_abi,
        flash_attn=image.flash_attn.version,
        flash_attn_source_build=image.flash_attn.source_build,
        flash_attn_wheel_url=_flash_attn_wheel(matrix, image, torch_cuda),
        flash_attn_requires=flash_attn.requires if flash_attn else (),
        deepspeed=image.deepspeed,
        deepspeed_ops=image.deepspeed_ops,
        cuda_arch_list=_arch_list(archs, image.flash_attn.source_build),
        transformers=image.transformers,
        trl=image.trl,
        accelerate=image.accelerate,
        peft=image.peft,
        trainer_version=trainer.version,
        trainer_requirements=_trainer_requirements(trainer, with_cuda=cuda is not None),
        repository=matrix.repository,
        max_size=sizes.parse(image.max_size) if image.max_size else None,
        cuda_archs=archs,
    )


def _trainer_requirements(trainer: Trainer, with_cuda: bool) -> tuple[str, ...]:
    """The trainer's dependencies and build tools (and its CUDA extra in an image with CUDA), less
    the packages every image pins itself.

    The framework layer installs them, so the trainer layer installs the trainer alone,
    offline, and a change to the trainer's code rebuilds nothing below it.
    """
    pinned = {c.distribution for c in PINNED_DISTRIBUTIONS}
    wanted = [*trainer.requirements, *trainer.build_requirements, *(trainer.cuda_requirements if with_cuda else ())]
    return tuple(sorted({str(r) for r in wanted if canonicalize_name(r.name) not in pinned}))


def _flash_attn_wheel(matrix: Matrix, image: ImageEntry, torch_cuda: str) -> str | None:
    choice = image.flash_attn
    if choice.version is None or choice.source_build:
        return None
    release = matrix.flash_attn[choice.version]
    torch = matrix.torch[image.torch]
    return FLASH_ATTN_WHEEL.format(
        version=choice.version, cu=release.cuda[torch_cuda.split(".")[0]],
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


def lock_problems(matrix: Matrix, specs: list[ImageSpec]) -> list[Problem]:
    """Images without a current lock, and facts of the matrix that a lock (read from the index)
    contradicts: what `imagegen validate` adds to the rules once the locks are read."""
    problems = []
    for spec in specs:
        entry = matrix.images[index_of(matrix, spec.name)]
        if spec.lock is None:
            rule = "lock-stale" if "stale" in (spec.lock_problem or "") else "lock-missing"
            problems.append(matrix.problem(("images", entry.index, "name"), spec.lock_problem, rule))
            continue
        build = rules.torch_build(matrix, entry)
        for key, typed in (("cudnn", build.cudnn), ("nccl", build.nccl)):
            family = next(c.lock_family for c in COMPONENTS if c.key == key)
            locked = spec.lock.family_version(family)
            if locked != typed:
                path = ("torch", spec.torch, "builds", build.cuda, key)
                problems.append(matrix.problem(path, f"torch {spec.torch}'s CUDA {build.cuda} build pins {family}* "
                                               f"{locked} in {spec.name}'s lock (read from the index), the matrix "
                                               f"says {typed}: correct the matrix", "lock-facts"))
    return list(dict.fromkeys(problems))  # once per image, not per platform
