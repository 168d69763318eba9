"""A lock checked against what it claims, offline, before anything is rendered from it.

A current lock (its recorded inputs are today's: `lockfile.stale_reasons`) could still have been edited by hand
after it was written: render installs what its entries say under a tag that says what the matrix pins. So its
entries must bear the claims out: the image its `image` field names and the platforms it has sections for are the
image's; the versions the matrix pins (torch, torchvision, every pinned component: `inputs.component_pins`), the
CUDA its torch build is for, the base and the flash-attn artifact are what it holds; every requirement it was made
from is met by its entry; and no entry is there that no requirement and no other entry pulls in (uv writes none
such). The shape of each entry (one per name, a version, hashes) is `lockfile._check_packages`'s.
Pure functions: each mismatch names its key path in the lock file and its rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagegen.locking.inputs import component_pins
from imagegen.locking.lockfile import Lock, LockedPackage
from imagegen.matrix.plan import PlannedImage

CUDA_RUNTIME = "nvidia-cuda-runtime"  # torch's CUDA runtime wheel: nvidia-cuda-runtime-cu12 12.4.127, or 13.0.96
Entries = Mapping[str, tuple[int, LockedPackage]]  # name -> its index in the file and its entry
NONE = (-1, None)


@dataclass(frozen=True)
class Mismatch:
    where: tuple  # the key path in the lock file: ("platforms", "linux/amd64", "packages", 12, "version")
    message: str
    rule: str


def mismatches(plan: PlannedImage, locks: Mapping[str, Lock]) -> list[Mismatch]:
    """What the image's lock file (its locks by platform) claims that `plan`'s platform does not bear out."""
    lock = locks[plan.platform]
    found = []
    if lock.image != plan.name:
        found.append(Mismatch(("image",), f"{lock.image!r}, the lock of another image: this file is {plan.name}'s",
                              "lock-image"))
    found += [Mismatch(("platforms", other), f"{plan.name} is not built for {other} (the matrix plans "
                                             f"{', '.join(plan.platforms)})", "lock-image")
              for other in sorted(locks) if other not in plan.platforms]
    entries = {package.name: (index, package) for index, package in enumerate(lock.packages)}  # one a name
    return found + _pin_mismatches(plan, lock, entries) + _package_mismatches(plan, lock, entries)


def _pin_mismatches(plan: PlannedImage, lock: Lock, entries: Entries) -> list[Mismatch]:
    section = ("platforms", plan.platform)
    found = []
    for component, version in component_pins(plan):
        index, package = entries.get(canonicalize_name(component.distribution), NONE)
        if package is not None and Version(package.version) != Version(version):
            found.append(Mismatch((*section, "packages", index, "version"), f"{package.name} {package.version}, where "
                                  f"the matrix pins {component.key} {version} for {plan.name}: its tag and labels say "
                                  f"{version}", "lock-pins"))
    cuda = plan.version("torch_cuda")
    index, runtime = next((entry for name, entry in entries.items() if name.startswith(CUDA_RUNTIME)), NONE)
    if cuda and runtime is not None and Version(runtime.version).release[:2] != Version(cuda).release[:2]:
        found.append(Mismatch((*section, "packages", index, "version"), f"{runtime.name} {runtime.version}, where "
                              f"{plan.name}'s torch build is for CUDA {cuda}", "lock-pins"))
    if lock.base.ref != plan.base.image:
        found.append(Mismatch((*section, "base", "ref"), f"{lock.base.ref!r}, where {plan.name} builds on "
                              f"{plan.base.image}", "lock-pins"))
    wanted = (lock.inputs.get("flash_attn") or {}).get("requirement")
    held = lock.flash_attn.requirement if lock.flash_attn else None
    if held != wanted:
        found.append(Mismatch((*section, "flash_attn", "requirement"), f"{held!r}, where the lock was made for "
                              f"{wanted!r}", "lock-pins"))
    return found


def _package_mismatches(plan: PlannedImage, lock: Lock, entries: Entries) -> list[Mismatch]:
    packages = ("platforms", plan.platform, "packages")
    pinned = {canonicalize_name(component.distribution) for component, _ in component_pins(plan)}
    requirements = [Requirement(line) for line in lock.inputs.get("requirements", ())]
    found = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        index, package = entries.get(name, NONE)
        if name not in pinned and package is not None and not requirement.marker and not \
                requirement.specifier.contains(package.version, prereleases=True):
            found.append(Mismatch((*packages, index, "version"), f"{name} {package.version} does not meet "
                                  f"{str(requirement)!r}, a requirement the lock was made from", "lock-packages"))
    wanted = {canonicalize_name(requirement.name) for requirement in requirements}
    found += [Mismatch((*packages, index, "name"), f"{package.name} {package.version}: no requirement the lock was "
                       "made from and no package in it needs it (its required_by is empty)", "lock-packages")
              for index, package in enumerate(lock.packages) if not package.required_by and package.name not in wanted]
    return found

