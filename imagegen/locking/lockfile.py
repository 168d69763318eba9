"""Lock files as plain data: what one image installs, exactly, and what the lock was made from.

A lock file (locks/<image>.json) holds, per platform of the image: every Python distribution with
its version, its hashes, the index it came from, which packages need it and what it requires (its index's
metadata); the flash-attn
artifact, which no index resolves; the digest the base image's tag pointed to; and the inputs it
was resolved from. Pure functions: reading, writing (through the caller's atomic writer),
staleness, install steps.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagegen.matrix.yamlsource import format_path

LOCK_VERSION = 2  # 2: each entry records its requirements (requires)
SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
CANONICAL_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class LockFormatError(ValueError):
    """A file in locks/ that is not a lock imagegen wrote; `where` is the key path of what is wrong in it (("platforms",
    "linux/amd64", "packages", 3, "hashes")), () when the file as a whole is not a lock."""

    def __init__(self, message: str, where: tuple = ()):
        super().__init__(message)
        self.message, self.where = message, where

    def __str__(self) -> str:
        return f"{format_path(self.where)}: {self.message}" if self.where else self.message


@dataclass(frozen=True)
class LockedPackage:
    name: str  # canonical: nvidia-cudnn-cu12
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", every file of that version on its index
    index: str | None  # the index it was resolved from
    required_by: tuple[str, ...] = ()  # canonical names of the packages that need it; () for a requirement
    requires: tuple[str, ...] = ()  # its Requires-Dist lines, as its index's metadata writes them (locking.requires)

    def requirement_line(self) -> str:
        """A pip requirements line that accepts only these files."""
        return " ".join([f"{self.name}=={self.version}", *(f"--hash={h}" for h in self.hashes)])


@dataclass(frozen=True)
class Artifact:
    """flash-attn, which no resolver can lock: its prebuilt wheel by URL, or its sdist to compile."""

    requirement: str  # a PEP 508 requirement: "flash-attn @ https://...whl" or "flash-attn==2.8.3"
    sha256: str | None  # None when its host could not be reached when locking: built only with --allow-unhashed
    note: str = ""  # why there is no hash

    def requirement_line(self) -> str:
        return self.requirement + (f" --hash=sha256:{self.sha256}" if self.sha256 else "")


@dataclass(frozen=True)
class BasePin:
    ref: str  # the matrix's base, e.g. nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04
    digest: str | None  # the manifest (list) digest the tag resolved to; None when the registry was unreachable
    note: str = ""  # why it is not pinned

    @property
    def pinned_ref(self) -> str:
        """What builds go FROM: the tag with its locked digest, so a moved or deleted tag changes nothing."""
        return f"{self.ref}@{self.digest}" if self.digest else self.ref


@dataclass(frozen=True)
class Lock:
    """One platform's lock of an image."""

    image: str
    platform: str  # linux/amd64
    inputs: dict  # what it was resolved from: see plan.lock_inputs
    base: BasePin
    packages: tuple[LockedPackage, ...]
    flash_attn: Artifact | None = None
    command: str = ""  # the command that refreshes it

    @property
    def unhashed(self) -> str | None:
        """The requirement of its artifact that has no sha256 (locked where its host did not answer), if any."""
        return self.flash_attn.requirement if self.flash_attn and self.flash_attn.sha256 is None else None

    def package(self, name: str) -> LockedPackage | None:
        wanted = canonicalize_name(name)
        return next((p for p in self.packages if p.name == wanted), None)

    def family_version(self, prefix: str) -> str | None:
        """The version of the one package whose name starts with prefix (nvidia-cudnn-cu -> cu12 or cu13)."""
        found = [p for p in self.packages if p.name.startswith(prefix)]
        return found[0].version if len(found) == 1 else None


@dataclass(frozen=True)
class InstallStep:
    """One resolver-free, hash-checked install of the framework layer: wheels first, then the
    sources it compiles against them (with no build isolation: the build sees the installed torch)."""

    name: str  # installer, cuda-libraries, cudnn-nccl, torch, build-tools, flash-attn, deepspeed, stack
    wheels: tuple[str, ...]  # requirement lines, one locked file set each
    sources: tuple[str, ...] = ()  # requirement lines built from source after the wheels
    unhashed: tuple[str, ...] = ()  # a flash-attn wheel whose host could not be reached when locking
    index_url: str | None = None  # the one index this step installs from; None: the configured indexes
    tool: str = "uv"  # the installer that runs the step: uv, or pip for the step that installs uv

    def files(self) -> dict[str, tuple[str, ...]]:
        """The requirement files the step mounts, by name, in the order it installs them."""
        parts = {"": self.wheels, "-sources": self.sources, "-unhashed": self.unhashed}
        return {f"requirements/{self.name}{suffix}.txt": lines for suffix, lines in parts.items() if lines}


def dumps(locks: list[Lock]) -> str:
    """One image's lock file: its locks by platform."""
    first = locks[0]
    payload = {
        "lock_version": LOCK_VERSION,
        "comment": f"Written by imagegen from matrix.yaml and the index. Do not edit: change matrix.yaml, "
                   f"then run `{first.command}`.",
        "image": first.image,
        "platforms": {lock.platform: {
            "inputs": lock.inputs,
            "base": asdict(lock.base),
            "flash_attn": asdict(lock.flash_attn) if lock.flash_attn else None,
            "packages": [{**asdict(p), "hashes": list(p.hashes), "required_by": list(p.required_by),
                          "requires": list(p.requires)}
                         for p in sorted(lock.packages, key=lambda p: p.name)],
        } for lock in sorted(locks, key=lambda lock: lock.platform)},
    }
    return json.dumps(payload, indent=1) + "\n"


def loads(text: str, command: str) -> dict[str, Lock]:
    """An image's locks by platform."""
    try:
        payload = json.loads(text)
        if payload.get("lock_version") != LOCK_VERSION:
            raise LockFormatError(f"lock_version {payload.get('lock_version')!r}, expected {LOCK_VERSION}")
        return {platform: _lock(payload["image"], platform, section, command)
                for platform, section in payload["platforms"].items()}
    except LockFormatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise LockFormatError(f"{type(error).__name__}: {error}") from None


def _lock(image: str, platform: str, section: dict, command: str) -> Lock:
    artifact = section.get("flash_attn")
    _check_packages(platform, section)
    return Lock(
        image=image,
        platform=platform,
        inputs=section["inputs"],
        base=BasePin(**section["base"]),
        packages=tuple(LockedPackage(p["name"], p["version"], tuple(p["hashes"]), p.get("index"),
                                     tuple(p.get("required_by", ())), tuple(p["requires"]))
                  for p in section["packages"]),
        flash_attn=Artifact(**artifact) if artifact else None,
        command=command,
    )


def _check_packages(platform: str, section: dict) -> None:
    """Each entry as imagegen writes it (a canonical name, once; a version; at least one sha256 of the right form), and
    the stack whole: every requirement the lock was made from, and every package an entry says needs it, is there.
    A hand-edited lock fails here, naming the entry, before render would install a package unchecked or drop it."""
    names: dict[str, int] = {}
    packages = ("platforms", platform, "packages")
    for index, entry in enumerate(section["packages"]):
        name = entry.get("name")
        if not isinstance(name, str) or not CANONICAL_NAME.fullmatch(name):
            raise LockFormatError(f"{name!r} is not a canonical distribution name", (*packages, index, "name"))
        if name in names:
            raise LockFormatError(f"{name!r} is listed twice (also at packages[{names[name]}]): one entry per package",
                                  (*packages, index, "name"))
        try:
            Version(str(entry.get("version")))
        except InvalidVersion:
            raise LockFormatError(f"{name}: {entry.get('version')!r} is not a version",
                                  (*packages, index, "version")) from None
        hashes = entry.get("hashes")
        if not isinstance(hashes, list) or not hashes or not all(isinstance(h, str) and SHA256.fullmatch(h)
                                                                  for h in hashes):
            raise LockFormatError(f"{name}: hashes must be one or more 'sha256:<64 hex digits>', one per file",
                                  (*packages, index, "hashes"))
        requires = entry.get("requires")
        if not isinstance(requires, list) or not all(isinstance(line, str) for line in requires):
            raise LockFormatError(f"{name}: requires must be a list of its Requires-Dist lines",
                                  (*packages, index, "requires"))
        names[name] = index
    for index, entry in enumerate(section["packages"]):
        missing = [parent for parent in entry.get("required_by", ()) if parent not in names]
        if missing:
            raise LockFormatError(f"{entry['name']}: required_by {missing[0]!r}, which the lock does not hold",
                                  (*packages, index, "required_by"))
    for number, line in enumerate(section["inputs"].get("requirements", ())):
        where = ("platforms", platform, "inputs", "requirements", number)
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            raise LockFormatError(f"{line!r} is not a requirement", where) from None
        if not requirement.marker and canonicalize_name(requirement.name) not in names:
            raise LockFormatError(f"the requirement {line!r} has no package in the lock", where)


def stale_reasons(lock: Lock, inputs: dict) -> list[str]:
    """How the inputs the lock was made from differ from today's; [] when it is current."""
    reasons = []
    for key in sorted(set(lock.inputs) | set(inputs)):
        was, now = lock.inputs.get(key), inputs.get(key)
        if was == now:
            continue
        if isinstance(was, list) and isinstance(now, list):
            added = [item for item in now if item not in was]
            removed = [item for item in was if item not in now]
            reasons.append(f"{key}: " + ", ".join([*(f"+{i}" for i in added), *(f"-{i}" for i in removed)]))
        else:
            reasons.append(f"{key}: {json.dumps(was)} -> {json.dumps(now)}")
    return reasons


# What compiling an sdist against the installed torch needs, without build isolation.
BUILD_TOOLS = ("setuptools", "wheel", "ninja", "packaging", "psutil")
# The installer of every step after the first: uv installs the same locked files as pip, in less time on a cold
# build (bench/RESULTS.md, section 5, measures both). pip, which the venv brings, installs it.
INSTALLER = "uv"
# The CUDA libraries PyPI publishes for torch (nvidia-cublas, nvidia-cudnn-cu13, nvidia-nccl-cu12, ...), installed
# in two steps of their own below torch.
CUDA_LIBRARY_PREFIX = "nvidia-"


@dataclass
class _Planner:
    lock: Lock
    installed: set[str] = field(default_factory=set)
    steps: list[InstallStep] = field(default_factory=list)

    def add(self, name: str, roots: list[str], sources: tuple[str, ...] = (), artifact: Artifact | None = None,
            build_artifact: bool = False, tool: str = INSTALLER) -> None:
        """A step for roots and all they need that no earlier step installed.

        Packages the lock took from the torch index get a step of their own that reads only that
        index, so that no file of another index with the same name and version can stand in."""
        names = _closure(self.lock, roots) - self.installed
        self.installed |= names
        chosen = [p for p in self.lock.packages if p.name in names]
        torch_index = self.lock.inputs.get("torch_index")
        from_torch_index = [p for p in chosen if torch_index and p.index == torch_index]
        if from_torch_index:
            self.steps.append(InstallStep(f"{name}-torch-index", _lines(from_torch_index), index_url=torch_index,
                                          tool=tool))
        built = [p for p in chosen if p.name in sources]
        wheels = _lines([p for p in chosen if p not in from_torch_index and p not in built])
        source_lines, unhashed = _lines(built), ()
        if artifact and artifact.sha256 is None:
            unhashed = (artifact.requirement_line(),)
        elif artifact and build_artifact:
            source_lines += (artifact.requirement_line(),)
        elif artifact:
            wheels += (artifact.requirement_line(),)
        if wheels or source_lines or unhashed:
            self.steps.append(InstallStep(name, wheels, source_lines, unhashed, tool=tool))


def _lines(packages: list[LockedPackage]) -> tuple[str, ...]:
    return tuple(p.requirement_line() for p in packages)


def _closure(lock: Lock, roots: list[str]) -> set[str]:
    needs: dict[str, set[str]] = {}
    for package in lock.packages:
        for parent in package.required_by:
            needs.setdefault(parent, set()).add(package.name)
    found: set[str] = set()
    pending = [canonicalize_name(root) for root in roots]
    while pending:
        name = pending.pop()
        if name not in found and lock.package(name) is not None:
            found.add(name)
            pending += sorted(needs.get(name, ()))
    return found


def install_steps(lock: Lock, deepspeed: bool, flash_attn_source_build: bool,
                  torch_families: tuple[str, ...] = (), extra_roots: tuple[str, ...] = ()) -> list[InstallStep]:
    """The framework layer's installs, in order.

    The installer first, then the CUDA libraries torch's wheels bring (nvidia-*) in two steps: the CUDA release's
    (cuBLAS, cuFFT, the runtime, ...) and then cuDNN and NCCL (torch_families, the name prefixes of the lock
    families of the components torch decides), which change with torch's release while the others change with the
    CUDA update; one step of all of them made a layer of over half the image that every pull waits on. Then torch
    (the largest layer, and the most stable: a bump of peft leaves their steps cached), then the tools that compile
    sources against it, flash-attn and DeepSpeed, then what the trainer extras of the image's components need
    (extra_roots: JupyterLab's packages, which in the stack's step made it a large layer that a one-package change
    sends again), and last the rest of the stack. The layers' sizes and shares are measured in bench/RESULTS.md,
    sections 2 and 14. A step's cache key is its parent's and its own requirement file, so images whose torch differs
    but whose CUDA libraries are the same versions (on the same base and Python) make one and the same layer of those
    libraries.
    """
    planner = _Planner(lock)
    planner.add("installer", [INSTALLER], tool="pip")
    cuda = [p.name for p in lock.packages if p.name.startswith(CUDA_LIBRARY_PREFIX)]
    planner.add("cuda-libraries", [name for name in cuda if not name.startswith(torch_families)])
    planner.add("cudnn-nccl", [name for name in cuda if name.startswith(torch_families)])
    planner.add("torch", ["torch", "torchvision"])
    if deepspeed or flash_attn_source_build:
        planner.add("build-tools", list(BUILD_TOOLS))
    if lock.flash_attn:
        planner.add("flash-attn", list(lock.inputs["flash_attn"]["requires"]), artifact=lock.flash_attn,
                    build_artifact=flash_attn_source_build)
    if deepspeed:
        planner.add("deepspeed", ["deepspeed"], sources=("deepspeed",))
    if extra_roots:
        planner.add("extras", list(extra_roots))
    planner.add("stack", [p.name for p in lock.packages])
    return planner.steps
