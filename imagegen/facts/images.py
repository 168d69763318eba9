"""`imagegen facts check` on the images and their locks, from what PyPI's metadata says.

- Each image's pins against what its other packages require of them: unconditionally, and through the extra
  named after a component the image has (TRL's `deepspeed` extra needs DeepSpeed >= 0.18.6).
- An image without a CUDA base that takes PyPI's torch (the `cpu` image): whether that wheel, on each of the
  image's platforms, carries the CUDA its labels say (its CUDA libraries are wheels) or none.
- Each lock's pins against what its torch wheel pins for the lock's Python and platform (cuDNN, NCCL, ...).
"""

from __future__ import annotations

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagegen.core.errors import Problem
from imagegen.core.platforms import MACHINE
from imagegen.facts.checker import Checker
from imagegen.locking import index, lockfile, requires, wheelnames
from imagegen.locking.markers import applies, environment
from imagegen.matrix.model import ImageEntry
from imagegen.matrix.plan import PYPI

OWN_FACTS = ("torch", "torchvision")  # what torch's release facts already check


def check(checker: Checker, locks: dict[str, str]) -> None:
    for image in checker.matrix.images:
        _check_image_requirements(checker, image)
        _check_wheel_cuda(checker, image)
    for path, text in locks.items():
        _check_lock(checker, path, text)


def _check_image_requirements(checker: Checker, image: ImageEntry) -> None:
    components = checker.matrix.components
    pins = {canonicalize_name(c.distribution): (c.key, image.versions.get(c.key)) for c in components
            if c.distribution and image.versions.get(c.key)}
    extras = {canonicalize_name(name) for name, (key, _) in pins.items()} | {key for key, _ in pins.values()}
    machine = MACHINE[image.platforms[0]]
    for name, (key, version) in pins.items():
        if name in OWN_FACTS or components[key].artifact:
            continue
        requirements = _release_requirements(checker, name, version)
        for requirement in requirements or ():
            other = canonicalize_name(requirement.name)
            if other == name or other not in pins:
                continue
            via = next((extra for extra in ("", *sorted(extras))
                        if applies(requirement, environment(image.python, machine, extra))), None)
            if via is None:
                continue
            other_key, pinned = pins[other]
            checker.fits(("images", image.index, other_key), pinned, f"{requirement.name}{requirement.specifier}",
                         requirement.specifier.contains(pinned, prereleases=True),
                         f"{name} {version}{f'[{via}]' if via else ''}")


def _release_requirements(checker: Checker, name: str, version: str) -> list[Requirement] | None:
    """A release's requirements from its wheel's metadata; None for an sdist alone (DeepSpeed)."""
    files = checker.files(PYPI, name, version, f"{name} {version}")
    wheel = next((f for f in files or () if f.is_wheel), None)
    return checker.metadata(wheel, f"{name} {version}") if wheel else None


def wheel_for(files: list[index.IndexFile], python: str, machine: str) -> index.IndexFile | None:
    """A Linux wheel for that CPython and machine, `manylinux*` or bare `linux_*`."""
    found = [f for f in files if f.is_wheel and wheelnames.linux_platforms(f.filename, machine)
             and wheelnames.python_of(f.filename) == python]
    return found[-1] if found else None


def cuda_of(requirements: list[Requirement], env: dict[str, str]) -> str | None:
    """The CUDA minor a torch wheel's pins carry there (nvidia-cuda-runtime-cu12, or CUDA 13's cuda-toolkit /
    nvidia-cuda-runtime), None for a CPU build."""
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        pinned = [s.version for s in requirement.specifier if s.operator == "=="]
        if pinned and name.startswith(("nvidia-cuda-runtime", "cuda-toolkit")) and applies(requirement, env):
            return ".".join(pinned[0].split(".")[:2])
    return None


def _check_wheel_cuda(checker: Checker, image: ImageEntry) -> None:
    """An image without a CUDA base takes its CUDA, if any, from PyPI's torch wheel: its labels say which."""
    torch = checker.matrix.torch.get(image.torch)
    if image.cuda is not None or image.torch_build != "pypi" or torch is None:
        return
    what = f"torch {image.torch} (image {image.name})"
    files = checker.files(PYPI, "torch", image.torch, what)
    for platform in image.platforms if files is not None else ():
        machine = MACHINE[platform]
        wheel = wheel_for(files, image.python, machine)
        if wheel is None:
            checker.differs(("images", image.index, "python"), f"a {platform} wheel", "none",
                            f"no Linux {machine} CPython {image.python} wheel of torch {image.torch} on PyPI")
            continue
        requirements = checker.metadata(wheel, f"{what} {machine}")
        if requirements is None:
            continue
        carried = cuda_of(requirements, environment(image.python, machine))
        checker.differs(("images", image.index, "torch_build"), f"CUDA {torch.pypi_build} ({platform})",
                        f"CUDA {carried} ({platform})" if carried else f"a CPU build ({platform})",
                        f"{wheel.filename} pins {'its CUDA runtime ' + carried if carried else 'no CUDA runtime'}")


def _check_lock(checker: Checker, path: str, text: str) -> None:
    try:
        locks = lockfile.loads(text, "")
    except lockfile.LockFormatError as error:
        checker.report.not_checked[path] = f"not a lock imagegen reads: {error}"
        return
    for platform, lock in sorted(locks.items()):
        _check_requires(checker, (path, text, platform), lock)
        pinned = {p.name: p.version for p in lock.packages}
        python, machine = lock.inputs.get("python", ""), MACHINE.get(platform, "")
        what = f"{path} ({platform}): torch {pinned.get('torch')}"
        files = checker.files(lock.inputs.get("torch_index") or PYPI, "torch", pinned.get("torch", "0"), what)
        wheel = wheel_for(files or [], python, machine)
        requirements = checker.metadata(wheel, what) if wheel else None
        if requirements is None:
            if files is not None:
                checker.report.not_checked[what] = f"no Linux {machine} CPython {python} wheel on its index"
            continue
        env = environment(python, machine)
        for requirement in requirements:
            wanted = [s.version for s in requirement.specifier if s.operator == "=="]
            if wanted and applies(requirement, env):
                name = canonicalize_name(requirement.name)
                _compare_pin(checker, (path, text, platform), name, pinned.get(name), wanted[0], wheel.filename)


def _check_requires(checker: Checker, where: tuple[str, str, str], lock: lockfile.Lock) -> None:
    """Each entry's recorded requirements (what the lock's graph is checked by, offline) against its index's metadata
    now: an entry whose requirements were edited with it is found here."""
    path, text, platform = where
    try:
        said = requires.read_requires(lock.packages, lock.inputs.get("python", ""), MACHINE.get(platform, ""))
    except index.PackageIndexError as error:
        checker.report.not_checked[f"{path} ({platform}): its packages' requirements"] = str(error)
        return
    for package in lock.packages:
        checker.report.checked += 1
        if list(said[package.name]) != list(package.requires):
            checker.report.disagreements.append(Problem(
                path, _line_of(text, platform, package.name), f"platforms.{platform}.packages.{package.name}",
                f"the index says {package.name} {package.version} requires {list(said[package.name])}, the lock "
                f"records {list(package.requires)}: re-lock the image", "facts"))


def _compare_pin(checker: Checker, where: tuple[str, str, str], name: str, locked: str | None, wanted: str,
                 wheel: str) -> None:
    path, text, platform = where
    checker.report.checked += 1
    if locked is not None and Version(locked) == Version(wanted):  # 13.0.3 and 13.0.3.0 are one version
        return
    checker.report.disagreements.append(Problem(
        path, _line_of(text, platform, name), f"platforms.{platform}.packages.{name}",
        f"the index says {wanted} ({wheel} pins {name}=={wanted}), the lock says {locked or 'nothing'}: "
        "re-lock the image", "facts"))


def _line_of(text: str, platform: str, name: str) -> int:
    """The line of a package in a lock file's platform section (of the platform's heading if it is absent)."""
    lines = text.splitlines()
    start = next((n for n, line in enumerate(lines) if line.strip().startswith(f'"{platform}"')), 0)
    found = next((n for n in range(start, len(lines)) if f'"name": "{name}"' in lines[n]), start)
    return found + 1
