"""A lock checked against what it claims, offline, before anything is rendered from it.

A current lock (its recorded inputs are today's: `lockfile.stale_reasons`) could still have been edited by hand
after it was written: render installs what its entries say under a tag that says what the matrix pins. So its
entries must bear the claims out: the image its `image` field names and the platforms it has sections for are the
image's; the versions the matrix pins (torch, torchvision, every pinned component: `inputs.component_pins`), the
CUDA its torch build is for, the base and the flash-attn artifact are what it holds; and its whole graph, walked from
the requirements it was made from through each entry's requirements as its index's metadata states them (`requires`,
recorded by `imagegen lock` and read from the index again by `imagegen facts check`), is there: each requirement
met at a version that satisfies it, no entry that nothing requires (uv writes none such), and each entry's
required_by what the walk finds, not what the file claims. The shape of each entry (one per name, a version, hashes)
is `lockfile._check_packages`'s.
Pure functions: each mismatch names its key path in the lock file and its rule.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping

from packaging.utils import canonicalize_name
from packaging.version import Version

from imagegen.core.platforms import MACHINE
from imagegen.locking import markers
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
    """The lock's graph walked from the requirements it was made from through each entry's own requirements (its
    index's metadata, `requires`), markers evaluated for the lock's Python and machine, extras followed: every
    requirement met by an entry at a version that satisfies it, every entry reached, and each entry's required_by (which
    the install steps layer by) what the walk found. The pin of a matrix component is `_pin_mismatches`'s."""
    packages = ("platforms", plan.platform, "packages")
    pinned = {canonicalize_name(component.distribution) for component, _ in component_pins(plan)}
    walk = _Walk(entries, (lock.inputs.get("python", ""), MACHINE.get(plan.platform, "")), packages, pinned)
    python, machine = walk.where
    walk.run([(line, None, ("platforms", plan.platform, "inputs", "requirements", number))
              for number, line in enumerate(lock.inputs.get("requirements", ()))
              if markers.parsed(line) is None or markers.line_applies(line, python, machine)])
    found = walk.found
    for name, (index, package) in entries.items():
        parents = sorted(walk.parents.get(name, set()) - {None})
        if name not in walk.parents:
            found.append(Mismatch((*packages, index, "name"), f"{package.name} {package.version}: no requirement the "
                                  "lock was made from and no package in it requires it (by their index's metadata)",
                                  "lock-packages"))
        elif sorted(package.required_by) != parents:
            found.append(Mismatch((*packages, index, "required_by"), f"{package.name}: required_by "
                                  f"{list(package.required_by)}, where its index's metadata has it required by "
                                  f"{parents}", "lock-packages"))
    return found


class _Walk:
    """A walk of a lock's graph; what does not hold is in `found`."""

    def __init__(self, entries: Entries, where: tuple[str, str], packages: tuple, pinned: set[str]):
        self.entries, self.where, self.packages, self.pinned = entries, where, packages, pinned  # where: python, machine
        self.parents: dict[str, set] = {}  # name -> the entries (None: the lock's own requirements) requiring it
        self.extras: dict[str, set[str]] = {}  # name -> the extras of it walked
        self.found: list[Mismatch] = []

    def run(self, roots: list[tuple]) -> None:
        """Breadth first, so that what the lock was made from is said before what its packages require."""
        pending = deque(roots)
        while pending:
            pending.extend(self.require(*pending.popleft()))

    def require(self, line: str, parent: str | None, where: tuple) -> list[tuple]:
        """What to walk next: the requirements of the package this one reaches, where it is reached anew."""
        requirement = markers.parsed(line)
        if requirement is None:
            self.found.append(Mismatch(where, "not a requirement", "lock-packages"))
            return []
        name = canonicalize_name(requirement.name)
        index, package = self.entries.get(name, NONE)
        who = f"{parent} {self.entries[parent][1].version} requires" if parent else "the lock was made from"
        if package is None:
            self.found.append(Mismatch(where, f"{who} {str(requirement)!r}, and the lock holds no {name}",
                                       "lock-packages"))
            return []
        if (parent or name not in self.pinned) and \
                not requirement.specifier.contains(package.version, prereleases=True):
            self.found.append(Mismatch((*self.packages, index, "version"), f"{name} {package.version} does not meet "
                                       f"{str(requirement)!r}, which {who}", "lock-packages"))
        new = name not in self.parents
        self.parents.setdefault(name, set()).add(parent if parent != name else None)  # its own extra: no parent
        added = {canonicalize_name(extra) for extra in requirement.extras} - self.extras.setdefault(name, set())
        if not (new or added):
            return []
        self.extras[name] |= {canonicalize_name(extra) for extra in added}
        asked = self.extras[name]
        return [(line, name, (*self.packages, index, "requires", number))
                for number, line, extras in markers.applicable(package.requires, *self.where)
                if extras is None or markers.holds(line, *self.where, extras, asked)]
