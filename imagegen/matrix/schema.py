"""The shape of matrix.yaml: which keys exist, their types, and which are required, as pydantic models.

Checking the shape first means the compatibility rules can trust the data they read. The image keys
that are components come from the file's own `components` table, so the table is checked first and the
image model is made from it. The validated facts (os, cuda, torch, flash_attn, packages) are the model
the rest of imagegen reads, with their defaults applied here: no second copy of them is built by hand.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Union

from pydantic import (BeforeValidator, Discriminator, Field, PrivateAttr, Tag, ValidationError, create_model,
                      model_validator)

from imagegen.core.errors import Problem
from imagegen.core.validation import (BOOL, INT, KEY, STR, TAG_PREFIX, VERSION, Strict, choice, fail, matching,
                                      problems, show)
from imagegen.matrix import components
from imagegen.matrix.yamlsource import Located

PLATFORMS = ("linux/amd64", "linux/arm64")
DEFAULT_PLATFORMS = ("linux/amd64",)  # of an image, a CUDA release's bases and a torch build that name none
CXX_STANDARD = 17  # of a torch release or a flash-attn build that says none
PLATFORM_LIST = list[choice(*PLATFORMS)]
# A name becomes a tag, a file name (locks/NAME.json) and a directory: the OCI tag grammar, so no "/" and no
# leading "." can take a path out of its folder.
NAME = matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "name",
                "cannot name an image: names become tags and file names, so use letters, digits, _, . and - "
                "(not first: . or -), at most 128 characters")
COMPONENT_KEY = re.compile(r"[a-z][a-z0-9_]*")  # becomes a key of expected.json and of `vlmgrpo info`
LABEL = matching(r"[a-z0-9][a-z0-9.-]*", "name", "cannot be a label: use lowercase letters, digits, . and -")
REPOSITORY = matching(r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                      r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*", "name",
                      "is not an image repository such as ghcr.io/acme/vlm-grpo (lowercase path parts)")
# Where an image's lock can be made: PyPI (and this machine), or only where the PyTorch index answers.
LOCK_SOURCES = ("pypi", "pytorch-index")


def either(options: dict[str, Any], describe: str) -> Any:
    """One of several shapes, chosen by the value's type: a mapping, a list or a scalar."""
    def shape(value: Any) -> str:
        kind = "mapping" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"
        return TAG_PREFIX + (kind if kind in options else "none")

    def refuse(value: Any) -> Any:
        fail("type", f"expected {describe}, got {show(value)}")

    members = [Annotated[hint, Tag(TAG_PREFIX + kind)] for kind, hint in options.items()]
    members.append(Annotated[Any, BeforeValidator(refuse), Tag(TAG_PREFIX + "none")])
    return Annotated[Union[tuple(members)], Discriminator(shape)]


class ComponentRow(Strict):
    title: STR
    label: LABEL = None
    distribution: STR = None
    from_: choice(components.IMAGE, components.TORCH) = Field(None, alias="from")
    image_key: BOOL = None
    lock_family: STR = None
    required: BOOL = None
    artifact: BOOL = None
    column: BOOL = None
    in_name: BOOL = None
    trainer_extra: STR = None
    cuda_extras: dict[KEY, STR] = None  # CUDA major -> the extra of its distribution taken on that CUDA

    def component(self, key: str) -> components.Component:
        """The row as the table holds it, the defaults of what it leaves out (None here) applied."""
        source = self.from_ or components.IMAGE
        return components.Component(
            key=key, title=self.title, label=self.label or key, distribution=self.distribution, source=source,
            image_key=source == components.IMAGE if self.image_key is None else self.image_key,
            lock_family=self.lock_family, required=bool(self.required), artifact=bool(self.artifact),
            column=self.column is not False, in_name=bool(self.in_name), trainer_extra=self.trainer_extra,
            cuda_extras=tuple(sorted((self.cuda_extras or {}).items())))


def component_table(rows: dict[str, ComponentRow]) -> components.Components:
    """The component table from matrix.yaml's `components` rows as validated, in their order."""
    return components.Components(tuple(row.component(key) for key, row in rows.items()))


class SourceBuild(Strict):
    version: VERSION
    build: choice("source", "wheel")


ARTIFACT_CHOICE = either({"scalar": VERSION, "mapping": SourceBuild},
                         "a quoted version string such as \"12.4\" or a mapping with keys version, build")


class Keyed(Strict):
    """The value of a mapping in the file that knows its key (a CUDA minor, a torch version): set by `keyed`."""

    _key: str = PrivateAttr(default="")


def keyed(mapping: dict[str, Keyed] | None) -> dict[str, Keyed]:
    """The mapping, each value told its key."""
    for key, value in (mapping or {}).items():
        value._key = key
    return dict(mapping or {})


def by_platform(archs: Any, platforms: Any) -> dict[str, tuple[str, ...]]:
    """Platform -> architectures, from one list for every platform or a mapping with a list per platform."""
    if archs is None:
        return {}
    if isinstance(archs, list):
        return {platform: tuple(archs) for platform in platforms}
    return {platform: tuple(listed) for platform, listed in archs.model_dump(by_alias=True).items() if listed}


class OsFacts(Strict):
    python: VERSION
    glibc: VERSION  # the manylinux level its wheels are resolved for
    extra_python: choice("deadsnakes") = None


class BaseImages(Strict):
    devel: STR
    runtime: STR


# Where a fact that `imagegen facts check` cannot confirm everywhere comes from: the file of a project at a
# release tag or commit (PyTorch's .github/scripts/generate_binary_build_matrix.py at v2.11.0), or a release page.
SOURCE = STR


def _branch(value: Any) -> Any:
    if not isinstance(value, str) or not re.fullmatch(r"[1-9][0-9]{2}", value):
        fail("driver-branch", f"{value!r} is not a driver branch: write the first number of its driver versions, "
             "quoted, such as \"570\" (570.124.06 is an R570 driver)")
    return value


def _numbers(pattern: str, example: str) -> Any:
    """A quoted version of numbers and dots such as the container toolkit compares (`example`)."""
    def check(value: Any) -> Any:
        if not isinstance(value, str):
            fail("type", f"expected a quoted version such as \"{example}\", got {show(value)}: quote it")
        if not re.fullmatch(pattern, value):
            fail("type", f"{value!r} is not a version such as \"{example}\" (numbers and dots)")
        return value
    return Annotated[str, BeforeValidator(check)]


BRANCH = Annotated[str, BeforeValidator(_branch)]
DRIVER_VERSION = _numbers(r"[1-9][0-9]{2}(\.[0-9]+)*", "570.124.06")  # or a branch alone: "580"
CUDA_MINOR = _numbers(r"[0-9]+\.[0-9]+", "12.8")
BRAND = matching(r"[a-z]+", "name", "is not a GPU brand as NVML names it, such as tesla (lowercase letters)")


class Driver(Strict):
    """A CUDA line's drivers, from NVIDIA's documents (imagegen.matrix.drivers turns them into NVIDIA_REQUIRE_CUDA)."""

    shipped: DRIVER_VERSION  # the driver its toolkit ships ("CUDA Toolkit and Corresponding Driver Versions")
    minimum: DRIVER_VERSION  # the oldest that runs it on any GPU through minor-version compatibility (release notes' table)
    # The datacenter branches its forward-compatibility package (cuda-compat-X-Y, which nvidia/cuda's images carry) runs
    # on, as nvidia/cuda's own NVIDIA_REQUIRE_CUDA lists them (brand=...,driver>=N,driver<N+1).
    forward: list[BRANCH]
    source: SOURCE  # the release notes of this very update: shipped and minimum
    forward_source: SOURCE  # nvidia/cuda's Dockerfile of this update: forward


class DriverFacts(Strict):
    """What every CUDA line's requirement is read with: the CUDA each driver branch supports (what the container
    toolkit compares `cuda>=X.Y` with), and the GPU brands forward compatibility is for."""

    branches: dict[BRANCH, CUDA_MINOR]
    datacenter_brands: list[BRAND]
    source: SOURCE
    brands_source: SOURCE


class ArchsPerPlatform(Strict):
    amd64: list[VERSION] = Field(None, alias="linux/amd64")
    arm64: list[VERSION] = Field(None, alias="linux/arm64")


class CudaFacts(Keyed):
    version: VERSION  # "12.4.1"
    os: STR
    cudnn: INT = None  # the base image's cuDNN major; absent when the base carries none (torch's wheels do)
    base: BaseImages
    driver: Driver
    platforms: PLATFORM_LIST = Field(default_factory=lambda: list(DEFAULT_PLATFORMS))  # its base images exist for
    # One list for every platform, or one per platform (GH200 and GB200 are arm64 hosts).
    archs: either({"list": list[VERSION], "mapping": ArchsPerPlatform},
                  "a list or a mapping with keys linux/amd64, linux/arm64")
    source: STR = None  # where its base tags come from (no index here confirms them); its driver's: driver.source

    @property
    def minor(self) -> str:
        """Its key in the file: "12.4"."""
        return self._key

    @property
    def archs_by_platform(self) -> dict[str, tuple[str, ...]]:
        """Platform -> the compute capabilities to build for."""
        return by_platform(self.archs, self.platforms)


# A compute capability as TORCH_CUDA_ARCH_LIST spells it: 8.6, 9.0a, 12.0+PTX.
TORCH_ARCH = matching(r"\d+\.\d+[af]?(\+PTX)?", "arch", "is not a compute capability such as 8.6 or 12.0+PTX")


class TorchArchsPerPlatform(Strict):
    amd64: list[TORCH_ARCH] = Field(None, alias="linux/amd64")
    arm64: list[TORCH_ARCH] = Field(None, alias="linux/arm64")


class TorchBuild(Keyed):
    """One CUDA build of a torch release: what its wheels pin, and their C++ ABI. What it leaves out is the
    release's (TorchFacts fills it in)."""

    cudnn: VERSION = None
    nccl: VERSION = None
    cxx11_abi: BOOL = None
    platforms: PLATFORM_LIST = None  # those it has wheels for
    # What its wheels were compiled for (torch.cuda.get_arch_list()), per platform; facts check reads PyPI's.
    archs: either({"mapping": TorchArchsPerPlatform}, "a mapping with keys linux/amd64, linux/arm64") = None
    source: SOURCE = None  # where its pins come from, when no index here confirms them

    @property
    def cuda(self) -> str:
        """Its key in the file: the CUDA version its wheels are built for."""
        return self._key

    @property
    def archs_by_platform(self) -> dict[str, tuple[str, ...]]:
        return by_platform(self.archs, ())


class TorchFacts(Keyed):
    builds: dict[KEY, TorchBuild]
    pypi_build: VERSION
    python: STR  # a PEP 440 specifier such as ">=3.9,<3.14"
    cudnn: VERSION
    nccl: VERSION
    torchvision: VERSION
    cxx11_abi: BOOL
    cxx_standard: INT = CXX_STANDARD  # what its headers require (ATen/ATen.h's `#error C++20 or later ...`)
    platforms: PLATFORM_LIST = None
    source: SOURCE = None  # where its facts come from (PyTorch's build matrix at the release tag)

    @model_validator(mode="after")
    def _builds_default_to_the_release(self) -> "TorchFacts":
        for build in keyed(self.builds).values():
            build.cudnn = build.cudnn or self.cudnn
            build.nccl = build.nccl or self.nccl
            build.cxx11_abi = self.cxx11_abi if build.cxx11_abi is None else build.cxx11_abi
            build.platforms = build.platforms or self.platforms or list(DEFAULT_PLATFORMS)
            build.source = build.source or self.source
        return self

    @property
    def version(self) -> str:
        """Its key in the file: the release, "2.6.0"."""
        return self._key


class FlashAttnRelease(Keyed):
    torch: list[VERSION]
    cuda: dict[KEY, VERSION]  # CUDA major -> the tag in the wheel's name
    # Where its wheels for a CUDA major cover fewer torch releases than `torch` (2.8.3: torch 2.10 on CUDA 13 only).
    torch_by_cuda: dict[KEY, list[VERSION]] = Field(default_factory=dict)
    python: list[VERSION]
    cxx11_abi: list[BOOL]  # the C++ ABIs its wheels are built for
    cxx_standard: INT = CXX_STANDARD  # the -std=c++NN its build passes to g++ and nvcc
    requires: list[STR] = Field(default_factory=list)  # its own requirements, installed from the lock beside it
    source: SOURCE = None  # its release page: what lists its wheels

    @property
    def version(self) -> str:
        return self._key

    def torch_for(self, cuda_major: str) -> list[str]:
        """The torch major.minor releases its wheels for that CUDA major cover."""
        return self.torch_by_cuda.get(cuda_major, self.torch)


class PackageRelease(Strict):
    """What a release of a package declares on the index: Requires-Python, the torch it requires and, for
    DeepSpeed, the torch its CI tests."""

    python: STR = None
    torch: STR = None
    tested_torch: list[VERSION] = Field(default_factory=list)
    # The C++ ABI of the compiled code it (or what it pulls in) loads into torch: an image whose torch build has the
    # other ABI fails at import with an undefined symbol.
    cxx11_abi: BOOL = None
    source: SOURCE = None


# What a known-bad entry's `with` names: an image that has DeepSpeed, or whose trainer runs Qwen-VL models.
KNOWN_BAD_WITH = ("deepspeed", "qwen-vl")


def known_bad_model(table: components.Components) -> type[Strict]:
    """A known-bad combination: a version range per component it names (`torch: ">=2.9,<2.10"`, `cudnn: "<9.15"`),
    what else the image must have, why, whether it is warned rather than refused, and the upstream issues."""
    ranges = {component.key: (STR, None) for component in table}
    return create_model("KnownBad", __base__=Strict, **ranges, with_=(choice(*KNOWN_BAD_WITH), Field(None, alias="with")),
                        reason=(STR, ...), warn=(BOOL, None), issues=(list[STR], None))


DEEPSPEED_OPS = ("cpu_adam", "fused_adam", "fused_lamb", "transformer", "stochastic_transformer", "utils", "aio")


def image_fields(table: components.Components) -> dict[str, Any]:
    """The keys an image (or `defaults`) may set: its base, platforms and build settings, and each component
    the table marks as an image key."""
    fields: dict[str, Any] = {
        "name": NAME, "cuda": VERSION, "base": STR, "os": STR, "flavor": choice("devel", "runtime"),
        "torch_build": VERSION, "platforms": PLATFORM_LIST,
    }
    for component in table:
        if component.image_key:
            fields[component.key] = ARTIFACT_CHOICE if component.artifact else VERSION
    fields.update({"deepspeed_ops": list[choice(*DEEPSPEED_OPS)], "max_size": STR, "lock": choice(*LOCK_SOURCES)})
    return fields


def _model(name: str, fields: dict[str, Any], required: tuple[str, ...] = ()) -> type[Strict]:
    # An optional key defaults to None but is not nullable: `key:` with no value is reported, not taken as unset.
    return create_model(name, __base__=Strict,
                        **{key: (hint, ...) if key in required else (hint, None) for key, hint in fields.items()})


@functools.lru_cache(maxsize=8)  # a model is made once per table: pydantic builds its validator then
def matrix_model(table: components.Components) -> type[Strict]:
    fields = image_fields(table)
    image = _model("Image", fields, required=("name", "python", "torch"))
    defaults = _model("Defaults", {k: v for k, v in fields.items() if k != "name"})
    return _model("Matrix", {
        "repository": REPOSITORY, "latest": STR, "components": dict[KEY, ComponentRow],
        "os": dict[KEY, OsFacts], "cuda": dict[KEY, CudaFacts], "torch": dict[KEY, TorchFacts],
        "flash_attn": dict[KEY, FlashAttnRelease], "packages": dict[KEY, dict[KEY, PackageRelease]],
        "known_bad": list[known_bad_model(table)], "defaults": defaults, "images": list[image],
        "drivers": DriverFacts,
    }, required=("repository", "components", "os", "cuda", "drivers", "torch", "images"))


TABLE = _model("Table", {"components": dict[KEY, ComponentRow]}, required=("components",))


def check(located: Located) -> list[Problem]:
    """Every shape problem in the file: unknown keys, missing keys, wrong types, bad names."""
    return validated(located)[1]


def validated(located: Located) -> tuple[Any, list[Problem]]:
    """(the matrix as the model validated it, None where it has problems; every shape problem in the file)."""
    data = located.data
    rows, found = _validate(TABLE, {"components": data.get("components")} if "components" in data else {}, located)
    found += [located.problem(("components", key), f"{key!r} cannot be a component key: use lowercase letters, "
                              "digits and _, starting with a letter", "name")
              for key in _mapping(data.get("components")) if isinstance(key, str) and not COMPONENT_KEY.fullmatch(key)]
    if found:
        return None, found
    table = component_table(rows.components)
    missing = [key for key in components.CORE_KEYS if key not in table]
    if missing:
        return None, [located.problem(("components",), "missing the rows imagegen reads by key: "
                                      f"{', '.join(missing)}", "required-key")]
    return _validate(matrix_model(table), data, located)


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _validate(model: type[Strict], data: Any, located: Located) -> tuple[Any, list[Problem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as error:
        return None, [located.problem(path, message, rule) for path, message, rule in problems(error, model)]
