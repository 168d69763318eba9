"""`imagegen facts check`: compare the matrix's typed facts with what the index says.

For every torch release and CUDA build the matrix lists: the Pythons its Linux x86_64 wheels
exist for (`manylinux*` and the PyTorch index's older bare `linux_x86_64` ones, see `imagegen.locking.wheelnames`),
the cuDNN, NCCL and CUDA runtime its wheel metadata pins, its C++ ABI (PyTorch builds
manylinux_2_28 wheels with the C++11 ABI and the older manylinux1/2014 and linux wheels without it),
and the torch its torchvision requires. For every package release under `packages`: Requires-Python
and the torch it requires. For flash-attn releases: the wheels on its GitHub release. For every
image and lock: `images`; for every base tag: `bases`. An index that does not answer is
reported once as not checked, with the source the matrix gives for what it could not confirm; nothing is guessed.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
import urllib.error
import urllib.request

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagegen.core.platforms import MACHINE
from imagegen.facts import bases, images
from imagegen.facts.checker import Checker, Report
from imagegen.locking import index, wheelnames
from imagegen.matrix import torch_archs
from imagegen.matrix.components import Components
from imagegen.matrix.model import Matrix
from imagegen.matrix.schema import FlashAttnRelease, PackageRelease, TorchBuild, TorchFacts
from imagegen.matrix.plan import PYPI, TORCH_INDEX

MACHINE_TAG = "x86_64"
AARCH64_LINUX = {"platform_machine": "aarch64", "platform_system": "Linux", "sys_platform": "linux", "extra": ""}
PYTHON_GRID = [f"3.{minor}" for minor in range(6, 17)]
READERS = 8  # wheels read at once for their archs
GITHUB_RELEASE = "https://api.github.com/repos/Dao-AILab/flash-attention/releases/tags/v{version}"
FLASH_ATTN_WHEEL = re.compile(r"^flash_attn-(?P<version>[^+]+)\+cu(?P<cu>\d+)torch(?P<torch>\d+\.\d+)"
                              r"cxx11abi(?P<abi>TRUE|FALSE)-cp3(?P<py>\d+)-cp3\d+-linux_x86_64\.whl$")


def check(matrix: Matrix, locks: dict[str, str] | None = None, base_registry: str | None = None) -> Report:
    """Every fact of the matrix, every image's pins against what its packages require, each lock (its
    file's path -> its text) against its torch wheel, and each base tag against its registry (or base_registry)."""
    checker = Checker(matrix)
    compiled_for: list[tuple[tuple, list[str], index.IndexFile, str]] = []  # read below, side by side
    for torch in matrix.torch.values():
        for cuda in torch.builds:
            compiled_for += _check_torch_build(checker, torch, cuda, matrix.components) or []
    _check_archs(checker, compiled_for)
    for name, releases in matrix.packages.items():
        for version, release in releases.items():
            _check_package(checker, name, version, release)
    for release in matrix.flash_attn.values():
        _check_flash_attn(checker, release)
    _check_cuda_updates(checker)
    images.check(checker, locks or {})
    bases.check(checker, base_registry)
    return checker.report


def _check_torch_build(checker: Checker, torch: TorchFacts, cuda: str, table: Components) -> list | None:
    """Its facts against its wheels; returns what is left to read: the archs its wheels were compiled for."""
    pypi = cuda == torch.pypi_build
    local = "" if pypi else f"+cu{cuda.replace('.', '')}"
    index_url = PYPI if pypi else TORCH_INDEX.format(nodot=cuda.replace(".", ""))
    what = f"torch {torch.version}{local}"
    at = ("torch", torch.version, "builds", cuda)
    source = None if pypi else torch.builds[cuda].source  # PyPI answers here; the PyTorch index may not
    files = checker.files(index_url, "torch", torch.version + local, what, source, None if pypi else at)
    if files is None:
        return
    wheels = [f for f in files if f.is_wheel and wheelnames.linux_platforms(f.filename)]
    if not wheels:
        checker.differs(at, "a build", "none", f"no Linux {MACHINE_TAG} wheel of {what} on {index_url}")
        return
    if "linux/arm64" in torch.builds[cuda].platforms:
        _check_aarch64(checker, (*at, "platforms"), files, what, table.families["cudnn"])
    pythons = sorted({wheelnames.python_of(f.filename) for f in wheels} - {None}, key=_minor_key)
    if pypi:
        checker.differs(("torch", torch.version, "python"), _admitted(torch.python), pythons,
                        f"{what} has Linux {MACHINE_TAG} wheels for these Pythons")
    checker.differs((*at, "cxx11_abi"), torch.builds[cuda].cxx11_abi, wheelnames.cxx11_abi(wheels[-1].filename),
                    f"{wheels[-1].filename} is a {'/'.join(sorted(wheelnames.linux_platforms(wheels[-1].filename)))}"
                    " wheel")
    requirements = checker.metadata(wheels[-1], what)
    if requirements is None:
        return
    pins = {canonicalize_name(r.name): pinned(r) for r in requirements}
    build = torch.builds[cuda]
    for key, family in table.torch_families.items():
        checker.differs((*at, key), getattr(build, key), family_pin(pins, family),
                        f"{wheels[-1].filename} pins {family}*")
    # CUDA 12 builds pin nvidia-cuda-runtime-cu12; CUDA 13 builds pin the cuda-toolkit metapackage.
    runtime = next(((n, v) for n, v in pins.items() if v and n.startswith(("nvidia-cuda-runtime", "cuda-toolkit"))),
                   None)
    if runtime:
        checker.differs(at, f"CUDA {cuda}", f"CUDA {'.'.join(runtime[1].split('.')[:2])}",
                        f"{wheels[-1].filename} pins {runtime[0]} {runtime[1]}")
    _check_torchvision(checker, torch, index_url, local)
    if pypi:  # one wheel per release: every build of it ships the same headers
        _check_cxx_standard(checker, torch, wheels[-1])
        return _archs_to_read(at, torch.builds[cuda], files, what)
    return None


def _check_cxx_standard(checker: Checker, torch: TorchFacts, wheel: index.IndexFile) -> None:
    """The C++ standard the release's headers require, as its wheel's ATen/ATen.h says (`#error C++20 or later`)."""
    try:
        read = index.torch_cxx_standard(wheel)
    except index.PackageIndexError:
        return  # the metadata check above already said whether this index answers
    checker.differs(("torch", torch.version, "cxx_standard"), torch.cxx_standard, read,
                    f"{wheel.filename}'s {index.CXX_STANDARD_HEADER}")


def _archs_to_read(at: tuple, build: TorchBuild, files: list[index.IndexFile], what: str) -> list:
    """Each platform whose archs the matrix states, with the wheel that says what it was compiled for."""
    found = []
    for platform, stated in build.archs_by_platform.items():
        machine = MACHINE[platform]
        wheels = [f for f in files if f.is_wheel and wheelnames.linux_platforms(f.filename, machine)]
        if wheels:  # a build without a wheel for a platform is said by the platform checks
            found.append(((*at, "archs", platform), list(stated), wheels[-1], f"{what} archs ({platform})"))
    return found


def _check_archs(checker: Checker, compiled_for: list[tuple[tuple, list[str], index.IndexFile, str]]) -> None:
    """What each wheel was compiled for (torch.cuda.get_arch_list(), read from a range of each wheel): the archs an
    image on that build claims and is checked for. Read side by side: each read waits on the index, not on this
    machine, so one at a time would cost the sum of the waits."""
    def read(job):
        try:
            return index.torch_arch_flags(job[2])
        except index.PackageIndexError as error:
            return error

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        results = list(pool.map(read, compiled_for))
    for (at, stated, wheel, what), flags in zip(compiled_for, results):
        if isinstance(flags, index.PackageIndexError):
            checker.unchecked(what, str(flags))
            continue
        checker.differs(at, stated, list(torch_archs.from_flags(flags)) or None,
                        f"{wheel.filename}'s {index.ARCH_LIBRARY}: {' '.join(flags) or 'a CPU build'}")


def _check_aarch64(checker: Checker, at: tuple, files: list[index.IndexFile], what: str, cudnn: str) -> None:
    """A build the matrix says has linux/arm64 wheels has them, and they are CUDA builds (PyPI's aarch64
    torch through 2.10 is CPU-only)."""
    wheels = [f for f in files if f.is_wheel and wheelnames.linux_platforms(f.filename, "aarch64")]
    if not wheels:
        checker.differs(at, "linux/arm64 wheels", "none", f"no Linux aarch64 wheel of {what}")
        return
    requirements = checker.metadata(wheels[-1], f"{what} aarch64")
    if requirements is not None:
        cuda = any(canonicalize_name(r.name).startswith(cudnn)
                   and (r.marker is None or r.marker.evaluate(AARCH64_LINUX)) for r in requirements)
        checker.differs(at, "linux/arm64 CUDA wheels", "linux/arm64 CUDA wheels" if cuda else "CPU-only aarch64 "
                        "wheels", f"{wheels[-1].filename} {'pins' if cuda else 'pins no'} {cudnn}*")


def _check_torchvision(checker: Checker, torch: TorchFacts, index_url: str, local: str) -> None:
    what = f"torchvision {torch.torchvision}{local}"
    files = checker.files(index_url, "torchvision", torch.torchvision + local, what)
    wheels = [f for f in files or () if f.is_wheel and wheelnames.linux_platforms(f.filename)]
    requirements = checker.metadata(wheels[-1], what) if wheels else None
    if requirements is None:
        if files is not None and not wheels:
            checker.differs(("torch", torch.version, "torchvision"), torch.torchvision, "none",
                            f"no Linux wheel of {what} on {index_url}")
        return
    wants = next((r.specifier for r in requirements if canonicalize_name(r.name) == "torch"), None)
    fits = wants is not None and wants.contains(torch.version + local, prereleases=True)
    checker.differs(("torch", torch.version, "torchvision"), torch.torchvision,
                    torch.torchvision if fits else f"not {torch.torchvision}", f"{what} requires torch{wants}")


def _check_package(checker: Checker, name: str, version: str, release: PackageRelease) -> None:
    what = f"{name} {version}"
    files = checker.files(PYPI, name, version, what)
    if files is None:
        return
    at = ("packages", name, version)
    if not files:
        checker.differs(at, "a release", "none", f"no file of {what} on {PYPI}")
        return
    declared = next((f.requires_python for f in files if f.requires_python), None)
    checker.differs((*at, "python"), _admitted(release.python) if release.python else None,
                    _admitted(declared) if declared else None, f"{what} declares Requires-Python {declared}")
    wheel = next((f for f in files if f.is_wheel), None)
    requirements = checker.metadata(wheel, what) if wheel else None
    if requirements is None:
        return  # an sdist alone (DeepSpeed): its requirements are known only by building it
    torch = torch_requirement(requirements)
    checker.differs((*at, "torch"), _normalized(release.torch), _normalized(torch),
                    f"{what} requires torch{torch or ' (nothing)'}")


def _check_flash_attn(checker: Checker, release: FlashAttnRelease) -> None:
    what = f"flash-attn {release.version} wheels"
    at = ("flash_attn", release.version)
    if "github" in checker.down:
        checker.unchecked(what, checker.down["github"], release.source, at)
        return
    url = GITHUB_RELEASE.format(version=release.version)
    try:
        with urllib.request.urlopen(urllib.request.Request(url), timeout=index.HTTP_TIMEOUT_S) as response:
            assets = [asset["name"] for asset in json.load(response).get("assets", [])]
    except (urllib.error.URLError, OSError, ValueError) as error:
        checker.down["github"] = f"cannot reach api.github.com: {getattr(error, 'reason', error)}"
        checker.unchecked(what, checker.down["github"], release.source, at)
        return
    wheels = [m for m in (FLASH_ATTN_WHEEL.match(name) for name in assets) if m]
    checker.differs((*at, "torch"), sorted(release.torch, key=_minor_key),
                    sorted({m["torch"] for m in wheels}, key=_minor_key), f"{url} assets")
    checker.differs((*at, "python"), sorted(release.python, key=_minor_key),
                    sorted({f"3.{m['py']}" for m in wheels}, key=_minor_key), f"{url} assets")
    checker.differs((*at, "cxx11_abi"), sorted(release.cxx11_abi), sorted({m["abi"] == "TRUE" for m in wheels}),
                    f"{url} assets")
    checker.differs((*at, "cuda"), sorted(release.cuda.values()), sorted({m["cu"] for m in wheels}),
                    f"{url} assets")
    for major, tag in release.cuda.items():
        if major in release.torch_by_cuda:
            checker.differs((*at, "torch_by_cuda", major), sorted(release.torch_by_cuda[major], key=_minor_key),
                            sorted({m["torch"] for m in wheels if m["cu"] == tag}, key=_minor_key),
                            f"{url} assets named +cu{tag}")


def _check_cuda_updates(checker: Checker) -> None:
    """Each CUDA line's version is a release NVIDIA published (PyPI's `cuda-toolkit` has one version per toolkit
    release, 13.0.3 as 13.0.3.0), and a newer update of that line is said: its bases and driver move with it."""
    files = checker.files(PYPI, "cuda-toolkit", None, "CUDA toolkit releases (cuda-toolkit on PyPI)")
    if files is None:
        return
    releases = sorted({v for v in (f.version() for f in files) if v and not v.is_prerelease})
    for minor, cuda in checker.matrix.cuda.items():
        line = [v for v in releases if f"{v.major}.{v.minor}" == minor]
        at = ("cuda", minor, "version")
        if not line:
            checker.differs(at, cuda.version, "no release", f"no cuda-toolkit {minor}.* on {PYPI}")
            continue
        ours = Version(cuda.version)
        known = [v for v in line if v == ours]
        checker.differs(at, cuda.version, cuda.version if known else f"not {cuda.version}",
                        f"cuda-toolkit {minor}.* on {PYPI}: {', '.join(map(_update, line))}")
        if known and line[-1] > ours:
            changed = _changed_parts(checker, files, known[0], line[-1])
            checker.newer_exists(at, f"CUDA {_update(line[-1])} is out (cuda-toolkit {line[-1]} on PyPI{changed}), "
                                     f"the matrix builds on {cuda.version}: move version, base and driver to it where "
                                     "its nvidia/cuda tags exist, and re-lock")


def _update(version: Version) -> str:
    """13.0.3.0 as NVIDIA names the release: 13.0.3."""
    return ".".join(str(part) for part in version.release[:3])


def _changed_parts(checker: Checker, files: list[index.IndexFile], ours: Version, newer: Version) -> str:
    """What the newer toolkit changes, as its metapackage pins its parts: some updates change every part (13.2.2:
    nvcc 13.2.78 to 13.2.86), some cuBLAS alone (13.0.3.0: nvidia-cublas 13.1.0.3 to 13.1.1.3, nvcc as 13.0.2's)."""
    pins = []
    for version in (ours, newer):
        wheel = next((f for f in files if f.is_wheel and f.version() == version), None)
        requirements = checker.metadata(wheel, f"cuda-toolkit {version}") if wheel else None
        if requirements is None:
            return ""
        pins.append({canonicalize_name(r.name): pinned(r).removesuffix(".*") for r in requirements if pinned(r)})
    # The compiler and the runtime first: what a reader weighs an update by.
    changed = sorted((name for name in pins[1] if pins[0].get(name) != pins[1][name]),
                     key=lambda name: (not name.startswith(("nvidia-cuda-nvcc", "nvidia-cuda-runtime")), name))
    if not changed:
        return ": the same parts"
    shown = [f"{name} {pins[0].get(name) or 'none'} to {pins[1][name]}" for name in changed[:2]]
    more = f" and {len(changed) - 2} more" if len(changed) > 2 else ""
    return f": {len(changed)} of its {len(pins[1])} parts change, {', '.join(shown)}{more}"


def pinned(requirement: Requirement) -> str | None:
    pins = [s.version for s in requirement.specifier if s.operator == "=="]
    return pins[0] if len(pins) == 1 else None


def family_pin(pins: dict[str, str | None], family: str) -> str | None:
    """The version a torch wheel pins of the one distribution whose name starts with `family` (nvidia-cudnn-cu)."""
    return next((version for name, version in pins.items() if name.startswith(family)), None)


def torch_requirement(requirements: list[Requirement]) -> str | None:
    """What a package requires of torch: unconditionally, or through its `torch` extra (transformers)."""
    for requirement in requirements:
        if canonicalize_name(requirement.name) != "torch":
            continue
        marker = str(requirement.marker or "")
        if not marker or marker.replace("'", '"') == 'extra == "torch"':
            return str(requirement.specifier) or None
    return None


def _admitted(spec: str | None) -> list[str] | str | None:
    """The Python minors a range admits, so that >=3.9 and >=3.9.0 compare equal."""
    try:
        pythons = SpecifierSet(spec or "")
    except InvalidSpecifier:
        return spec
    return [minor for minor in PYTHON_GRID if pythons.contains(f"{minor}.0", prereleases=True)]


def _normalized(spec: str | None) -> str | None:
    """A version range without trailing .0 parts: >=2.0.0 and >=2.0 are the same requirement."""
    if not spec:
        return None
    parts = sorted(str(s) for s in SpecifierSet(spec))
    return ",".join(re.sub(r"(\d)(\.0)+$", r"\1", part) for part in parts)


def _minor_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
