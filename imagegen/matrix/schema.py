"""The shape of matrix.yaml: which keys exist, their types, and which are required.

Checking the shape first means the compatibility rules can trust the data they read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from imagegen.matrix.components import COMPONENTS
from imagegen.core.errors import Problem
from imagegen.matrix.yamlsource import Located, Path


@dataclass(frozen=True)
class Scalar:
    kind: str  # "str" | "version" | "int" | "bool"
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        return {"version": "a quoted version string such as \"12.4\"", "str": "a string",
                "int": "an integer", "bool": "true or false"}[self.kind]


@dataclass(frozen=True)
class Struct:
    fields: dict[str, object]
    required: frozenset[str] = frozenset()

    def describe(self) -> str:
        return "a mapping with keys " + ", ".join(self.fields)


@dataclass(frozen=True)
class MapOf:
    value: object
    key_kind: str = "version"

    def describe(self) -> str:
        return "a mapping"


@dataclass(frozen=True)
class ListOf:
    item: object

    def describe(self) -> str:
        return "a list"


@dataclass(frozen=True)
class Either:
    options: tuple[object, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        return " or ".join(o.describe() for o in self.options)


VERSION = Scalar("version")
STR = Scalar("str")
PLATFORMS = ("linux/amd64", "linux/arm64")
PLATFORM_LIST = ListOf(Scalar("str", PLATFORMS))

FLASH_ATTN_CHOICE = Either((
    VERSION,
    Struct({"version": VERSION, "build": Scalar("str", ("source", "wheel"))},
           frozenset({"version", "build"})),
))

# Image keys that are components take their type from here, the rest are versions.
COMPONENT_TYPES = {"flash_attn": FLASH_ATTN_CHOICE}

IMAGE_FIELDS = {
    "name": STR,
    "cuda": VERSION,
    "base": STR,
    "os": STR,
    "flavor": Scalar("str", ("devel", "runtime")),
    "torch_build": VERSION,
    "platforms": PLATFORM_LIST,
    **{c.key: COMPONENT_TYPES.get(c.key, VERSION) for c in COMPONENTS if c.image_key},
    "deepspeed_ops": ListOf(Scalar("str", ("cpu_adam", "fused_adam", "fused_lamb", "transformer",
                                           "stochastic_transformer", "utils", "aio"))),
    "max_size": STR,
}

TORCH_BUILD = Struct({"cudnn": VERSION, "nccl": VERSION, "cxx11_abi": Scalar("bool"), "platforms": PLATFORM_LIST})

# What a release of a package declares on the index: Requires-Python, the torch it requires and,
# for DeepSpeed, the torch its CI tests.
PACKAGE_RELEASE = Struct({"python": STR, "torch": STR, "tested_torch": ListOf(VERSION)})

MATRIX = Struct(
    {
        "repository": STR,
        "latest": STR,
        "os": MapOf(Struct({"python": VERSION, "glibc": VERSION, "extra_python": Scalar("str", ("deadsnakes",))},
                           frozenset({"python", "glibc"})), key_kind="str"),
        "cuda": MapOf(Struct(
            {
                "version": VERSION,
                "os": STR,
                "cudnn": Scalar("int"),
                "base": Struct({"devel": STR, "runtime": STR}, frozenset({"devel", "runtime"})),
                "driver": Struct({"shipped": VERSION, "minimum": VERSION},
                                 frozenset({"shipped", "minimum"})),
                "platforms": PLATFORM_LIST,
                # One list for every platform, or one per platform (GH200 and GB200 are arm64 hosts).
                "archs": Either((ListOf(VERSION), Struct({p: ListOf(VERSION) for p in PLATFORMS}))),
            },
            frozenset({"version", "os", "cudnn", "base", "driver", "archs"}),
        )),
        "torch": MapOf(Struct(
            {
                "builds": MapOf(TORCH_BUILD),
                "pypi_build": VERSION,
                "python": STR,
                "cudnn": VERSION,
                "nccl": VERSION,
                "torchvision": VERSION,
                "cxx11_abi": Scalar("bool"),
                "platforms": PLATFORM_LIST,
            },
            frozenset({"builds", "pypi_build", "python", "cudnn", "nccl", "torchvision", "cxx11_abi"}),
        )),
        "flash_attn": MapOf(Struct(
            {"torch": ListOf(VERSION), "cuda": MapOf(VERSION), "python": ListOf(VERSION),
             "cxx11_abi": ListOf(Scalar("bool")), "requires": ListOf(STR)},
            frozenset({"torch", "cuda", "python", "cxx11_abi"}),
        )),
        "packages": MapOf(MapOf(PACKAGE_RELEASE), key_kind="str"),
        "known_bad": ListOf(Struct(
            {"transformers": STR, "with": Scalar("str", ("deepspeed",)), "reason": STR},
            frozenset({"transformers", "with", "reason"}),
        )),
        "defaults": Struct({k: v for k, v in IMAGE_FIELDS.items() if k not in ("name",)}),
        "images": ListOf(Struct(IMAGE_FIELDS, frozenset({"name", "python", "torch"}))),
    },
    frozenset({"repository", "os", "cuda", "torch", "images"}),
)


def check(located: Located) -> list[Problem]:
    """Every shape problem in the file: unknown keys, missing keys, wrong types."""
    problems: list[Problem] = []
    _check(MATRIX, located.data, (), located, problems)
    return problems


def _check(spec, value, path: Path, located: Located, problems: list[Problem]) -> bool:
    if isinstance(spec, Scalar):
        return _check_scalar(spec, value, path, located, problems)
    if isinstance(spec, Either):
        for option in spec.options:
            if _check(option, value, path, located, []):
                return True
        problems.append(located.problem(path, f"expected {spec.describe()}, got {_show(value)}", "type"))
        return False
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            problems.append(located.problem(path, f"expected a list, got {_show(value)}", "type"))
            return False
        return all([_check(spec.item, item, (*path, i), located, problems) for i, item in enumerate(value)])
    if not isinstance(value, dict):
        problems.append(located.problem(path, f"expected {spec.describe()}, got {_show(value)}", "type"))
        return False
    if isinstance(spec, MapOf):
        ok = True
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(located.problem((*path, key), f"key {key!r} must be a quoted string "
                                                f"(write \"{key}\")", "type"))
                ok = False
            ok = _check(spec.value, item, (*path, key), located, problems) and ok
        return ok
    return _check_struct(spec, value, path, located, problems)


def _check_struct(spec: Struct, value: dict, path: Path, located: Located, problems: list[Problem]) -> bool:
    ok = True
    for key, item in value.items():
        if key not in spec.fields:
            allowed = ", ".join(spec.fields)
            problems.append(located.problem((*path, key), f"unknown key {key!r}; allowed keys: {allowed}",
                                            "unknown-key"))
            ok = False
            continue
        ok = _check(spec.fields[key], item, (*path, key), located, problems) and ok
    for key in sorted(spec.required - value.keys()):
        problems.append(located.problem(path, f"missing required key {key!r}", "required-key"))
        ok = False
    return ok


def _check_scalar(spec: Scalar, value, path: Path, located: Located, problems: list[Problem]) -> bool:
    expected = spec.describe()
    if spec.kind == "bool":
        good = isinstance(value, bool)
    elif spec.kind == "int":
        good = isinstance(value, int) and not isinstance(value, bool)
    else:
        good = isinstance(value, str)
        if not good and spec.kind == "version" and isinstance(value, (int, float)) and not isinstance(value, bool):
            problems.append(located.problem(
                path, f"version {value!r} was read as a number; quote it (for example \"{value}\") "
                      "so that 3.10 does not become 3.1", "type"))
            return False
    if good and spec.choices and value not in spec.choices:
        problems.append(located.problem(path, f"{value!r} is not allowed; expected {expected}", "choice"))
        return False
    if not good:
        problems.append(located.problem(path, f"expected {expected}, got {_show(value)}", "type"))
    return good


def _show(value) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}"
