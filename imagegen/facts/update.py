"""`imagegen facts update NAME==VERSION`: write a release's facts into the matrix as PyPI serves them.

A torch release: the CUDA build PyPI serves (the CUDA its wheels pin), its Pythons (from its wheels' names), the
cuDNN and NCCL its metadata pins, its C++ ABI, its platforms with CUDA wheels, what each was compiled for (archs),
the C++ standard its headers need and the torchvision released with it. A package under `packages`: its
Requires-Python and the torch it requires. Each is read as `imagegen facts check` reads it, so a written fact is one
that check agrees with, and is appended to its section with its `source`, the comments of the file kept. Facts PyPI
cannot serve (the PyTorch index's other builds, a CUDA line's base tags and driver) stay for a person to add with a
source. A release is known by its version as PEP 440 compares them; index text is written only if it is what its
field holds (a specifier on one line); the matrix is read and written under atomic.exclusive, and not written over
an edit saved meanwhile.
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from imagegen_contract import atomic
from imagegen.core.errors import UserError
from imagegen.core.platforms import MACHINE
from imagegen.facts import check, images
from imagegen.locking import index, wheelnames
from imagegen.matrix import model, schema, torch_archs, yamlsource
from imagegen.matrix.components import Components
from imagegen.matrix.plan import PYPI

TORCHVISION_TRIES = 24  # the newest torchvision releases whose metadata may be read to find the one for a torch


def update(matrix_path: Path, specs: tuple[str, ...]) -> list[str]:
    """Append each release's facts; one line per release said. UserError for a spec it cannot write, and for a
    matrix edited while the index was read (the edit is kept, nothing is written). One update at a time: a second
    waits for the first and reads what it wrote."""
    with atomic.exclusive(matrix_path):
        read = yamlsource.read(matrix_path)
        text, said = read, []
        matrix = model.parse(text, str(matrix_path))
        for spec in specs:
            text = _add(matrix, text, spec, said)
        if text == read:
            return said
        model.parse(text, str(matrix_path))  # what it wrote still loads, or nothing is written
        try:
            atomic.write_text(matrix_path, text, unchanged_from=read)
        except atomic.FileChanged:
            raise UserError(f"{matrix_path} changed while the index was read; nothing written, the change kept: run "
                            f"`imagegen facts update {' '.join(specs)}` again") from None
    return said


def _add(matrix: model.Matrix, text: str, spec: str, said: list[str]) -> str:
    """The text with one release's facts appended (the same text when the matrix has them), what it did in `said`."""
    name, version = _parse(spec)
    if name == "torch":
        known = _same_version(version, matrix.torch)
        if known:
            said.append(_already("torch", version, known))
            return text
        entry = torch_release(version, matrix.components)
        said.append(f"torch {version}: PyPI's CUDA {entry['pypi_build']} build, cuDNN {entry['cudnn']}, NCCL "
                    f"{entry['nccl']}, torchvision {entry['torchvision']}, Python {entry['python']}")
        return _append(text, "torch", _torch_yaml(version, entry))
    if name in matrix.packages or name in {c.distribution for c in matrix.components if c.distribution}:
        key = next((k for k in matrix.packages if canonicalize_name(k) == name), name)
        known = _same_version(version, matrix.packages.get(key, {}))
        if known:
            said.append(_already(key, version, known))
            return text
        entry = package_release(key, version)
        said.append(f"{key} {version}: " + ", ".join(f"{k} {v}" for k, v in entry.items() if k != "source"))
        return _append_package(text, key, version, entry)
    if name == "cuda-toolkit":
        raise UserError(f"{spec}: a CUDA line's base tags and driver are not on PyPI; add its `cuda` entry with "
                        "a `source` (its release notes), and `imagegen facts check` compares its version with "
                        "PyPI's cuda-toolkit releases")
    raise UserError(f"{spec}: {name} is neither torch nor a package of the matrix's components; facts "
                    "update writes torch releases and the releases of the packages under `packages`")


def _already(name: str, version: str, known: str) -> str:
    return (f"{name} {version} is in the matrix already{f' (as {known})' if known != version else ''}: "
            "`imagegen facts check` compares it")


def _same_version(version: str, known) -> str | None:
    """The release among `known` (the matrix's keys) that is `version` as PEP 440 compares (9.9.9.0 is 9.9.9)."""
    wanted = Version(version)
    for other in known:
        try:
            if Version(str(other)) == wanted:
                return str(other)
        except InvalidVersion:
            continue
    return None


def _parse(spec: str) -> tuple[str, str]:
    try:
        requirement = Requirement(spec)
        (pin,) = list(requirement.specifier)
        Version(pin.version)
    except (InvalidRequirement, InvalidVersion, ValueError):
        raise UserError(f"{spec!r} is not NAME==VERSION, e.g. torch==2.15.0 or transformers==5.24.0") from None
    if pin.operator != "==" or "*" in pin.version:
        raise UserError(f"{spec!r}: name one release, NAME==VERSION")
    return canonicalize_name(requirement.name), pin.version


def torch_release(version: str, table: Components) -> dict:
    """A torch release's facts from PyPI's wheels."""
    files = [f for f in index.release_files(PYPI, "torch", version) if f.is_wheel]
    linux = {platform: [f for f in files if wheelnames.linux_platforms(f.filename, MACHINE[platform])]
             for platform in MACHINE}
    if not linux["linux/amd64"]:
        raise UserError(f"torch {version}: PyPI has no Linux x86_64 wheel of it")
    wheel = linux["linux/amd64"][-1]
    requirements = index.requirements(index.wheel_metadata(wheel))
    pins = {canonicalize_name(r.name): check.pinned(r) for r in requirements}
    env = images.environment(wheelnames.python_of(wheel.filename) or "3.12")
    cuda = images.cuda_of(requirements, env)
    if cuda is None:
        raise UserError(f"torch {version}: PyPI's build pins no CUDA runtime (a CPU build); the matrix lists CUDA "
                        "builds")
    platforms = [p for p in MACHINE if linux[p] and (p == "linux/amd64" or _carries_cuda(linux[p][-1], p))]
    pythons = sorted({wheelnames.python_of(f.filename) for f in linux["linux/amd64"]} - {None},
                     key=lambda minor: int(minor.split(".")[1]))
    archs = {p: list(torch_archs.from_flags(index.torch_arch_flags(linux[p][-1]))) for p in platforms}
    build = {"platforms": platforms} if platforms != ["linux/amd64"] else {}
    build["archs"] = archs
    return {
        "source": f"https://pypi.org/project/torch/{version}/",
        "builds": {cuda: build},
        "pypi_build": cuda,
        "python": f">={pythons[0]},<3.{int(pythons[-1].split('.')[1]) + 1}",
        **{key: check.family_pin(pins, family) for key, family in table.torch_families.items()},
        "torchvision": _torchvision_for(version),
        "cxx11_abi": wheelnames.cxx11_abi(wheel.filename),
        "cxx_standard": index.torch_cxx_standard(wheel),
    }


def _carries_cuda(wheel: index.IndexFile, platform: str) -> bool:
    requirements = index.requirements(index.wheel_metadata(wheel))
    env = images.environment(wheelnames.python_of(wheel.filename) or "3.12", MACHINE[platform])
    return images.cuda_of(requirements, env) is not None


def _torchvision_for(version: str) -> str:
    """The newest torchvision whose wheel requires exactly this torch (torchvision pins the torch it was built on)."""
    releases = sorted({f.version() for f in index.project_files(PYPI, "torchvision") if f.version()}, reverse=True)
    for release in [r for r in releases if not r.is_prerelease][:TORCHVISION_TRIES]:
        wheels = [f for f in index.release_files(PYPI, "torchvision", str(release)) if f.is_wheel
                  and wheelnames.linux_platforms(f.filename)]
        if not wheels:
            continue
        wants = next((r.specifier for r in index.requirements(index.wheel_metadata(wheels[-1]))
                      if canonicalize_name(r.name) == "torch"), None)
        if wants is not None and wants.contains(version, prereleases=True):
            return str(release)
    raise UserError(f"torch {version}: no torchvision on PyPI requires it; add the release's torchvision by hand")


def package_release(name: str, version: str) -> dict:
    """What a package release declares on PyPI: Requires-Python, and the torch it requires (if any)."""
    files = index.release_files(PYPI, name, version)
    if not files:
        raise UserError(f"{name} {version}: PyPI has no such release")
    entry = {}
    declared = next((f.requires_python for f in files if f.requires_python), None)
    if declared:
        entry["python"] = _specifier(name, version, "Requires-Python", declared)
    wheel = next((f for f in files if f.is_wheel), None)
    torch = check.torch_requirement(index.requirements(index.wheel_metadata(wheel))) if wheel else None
    if torch:
        entry["torch"] = _specifier(name, version, "torch requirement", torch)
    return entry


def _specifier(name: str, version: str, what: str, text: str) -> str:
    """The index's text, if it is a PEP 440 specifier on one line, as the matrix will quote it; else UserError."""
    try:
        SpecifierSet(text)
        written = text.isprintable() and not {'"', "\\"} & set(text)
    except InvalidSpecifier:
        written = False
    if not written:
        raise UserError(f"{name} {version}: the index's {what} {text!r} is not a version specifier (PEP 440) on one "
                        "line; nothing written")
    return text


def _torch_yaml(version: str, entry: dict) -> str:
    (cuda, build), = entry["builds"].items()
    lines = [f'  "{version}":',
             f"    # Read from PyPI by `imagegen facts update torch=={version}`: its CUDA {cuda} build alone;",
             "    # the PyTorch index's builds are added with their source.",
             f"    source: {entry['source']}", "    builds:", f'      "{cuda}":']
    if "platforms" in build:
        lines.append(f"        platforms: [{', '.join(build['platforms'])}]")
    archs = ", ".join(f"{p}: [{', '.join(_quoted(a) for a in listed)}]" for p, listed in build["archs"].items())
    lines += [f"        archs: {{{archs}}}", f'    pypi_build: "{cuda}"', f'    python: "{entry["python"]}"',
              f"    cudnn: {entry['cudnn']}", f"    nccl: {entry['nccl']}", f"    torchvision: {entry['torchvision']}",
              f"    cxx11_abi: {'true' if entry['cxx11_abi'] else 'false'}"]
    if entry["cxx_standard"] != schema.CXX_STANDARD:
        lines.append(f"    cxx_standard: {entry['cxx_standard']}")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    return f'"{text}"'


def _append_package(text: str, name: str, version: str, entry: dict) -> str:
    fields = ", ".join(f'{key}: "{value}"' for key, value in entry.items())
    line = f'    "{version}": {{{fields}}}\n'
    lines = text.splitlines(keepends=True)
    start = _section(lines, "packages")
    heading = next((n for n in range(start + 1, _end(lines, start, 0)) if lines[n].rstrip() == f"  {name}:"), None)
    if heading is None:
        return _append(text, "packages", f"  {name}:\n{line}")
    at = _end(lines, heading, 2)
    return "".join(lines[:at] + [line] + lines[at:])


def _append(text: str, section: str, block: str) -> str:
    """`block` as the last entry of a top-level section, before the comments that head the next one."""
    lines = text.splitlines(keepends=True)
    start = _section(lines, section)
    at = _end(lines, start, 0)
    return "".join(lines[:at] + [block] + lines[at:])


def _section(lines: list[str], name: str) -> int:
    found = next((n for n, line in enumerate(lines) if line.rstrip() == f"{name}:"), None)
    if found is None:
        raise UserError(f"the matrix has no top-level `{name}:` section to add to")
    return found


def _end(lines: list[str], start: int, indent: int) -> int:
    """The line after an entry that starts at `start` with `indent` spaces: before the next line indented as much
    or less (or the blank lines and comments above it)."""
    end = len(lines)
    for n in range(start + 1, len(lines)):
        stripped = lines[n].strip()
        if stripped and not stripped.startswith("#") and len(lines[n]) - len(lines[n].lstrip()) <= indent:
            end = n
            break
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end
