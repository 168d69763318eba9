"""The driver an image needs, from matrix.yaml's facts: the one DriverRequirement its NVIDIA_REQUIRE_CUDA, its labels,
its expected.json, `imagegen matrix --driver` and `imagegen validate` all read.

NVIDIA's CUDA Compatibility guide (docs.nvidia.com/deploy/cuda-compatibility) gives two ways for a CUDA X.Y program
to run on a driver older than X.Y's own:
  - minor-version compatibility: on any GPU, under any driver of the same CUDA major from the line's
    `driver.minimum` on (525.60.13 for CUDA 12.x, 580 for 13.x), with a limited feature set (no PTX newer than the
    driver can compile, no API that needs a newer driver);
  - forward compatibility: on datacenter GPUs only ("NVIDIA Data Center GPUs, select NGC Server Ready SKUs of RTX
    cards, Jetson"), under the branches the line's CUDA compatibility package (cuda-compat-X-Y) supports, which must
    be in the image.
Which of the two an image gets depends on where its CUDA comes from. nvidia/cuda's images carry cuda-compat, and on an
older driver the container toolkit puts those libraries in front of the host's (libnvidia-container
src/cli/compat_mode.c: any compat library whose major is newer than the driver's), so they run under the branches
cuda-compat supports, on datacenter GPUs alone: nvidia/cuda's own variable says exactly that, `cuda>=X.Y` or
`brand=B,driver>=N,driver<N+1` per branch and datacenter brand. An image without cuda-compat (CUDA from NVIDIA's
wheels, or the libraries torch's wheels bring) runs on the host's own libcuda: minor-version compatibility, any GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from imagegen.core.errors import Problem
from imagegen.core.nvidia_require import RequirementError, admits, driver_cuda
from imagegen.matrix.model import Matrix
from imagegen_contract.driver import branch, compare, is_version, parts
from imagegen_contract.expected import REQUIREMENT_FORMAT

NATIVE = "its own CUDA"  # the driver supports the image's CUDA itself
MINOR = "minor-version compatibility"
FORWARD = "forward compatibility"  # through the image's cuda-compat
DATACENTER = "tesla"  # NVML's brand of a datacenter GPU (A100, H100): what "on datacenter GPUs" asks the toolkit
OTHER = "geforce"  # a brand outside the datacenter ones (GeForce, TITAN): what "on other GPUs" asks


@dataclass(frozen=True)
class DriverRequirement:
    """What driver an image's CUDA needs, and which GPUs that holds for."""

    cuda: str  # the CUDA line of the image's libraries: "12.8"
    native: str  # the oldest branch whose drivers support that CUDA themselves: "570"
    minimum: str | None  # minor-version compatibility's oldest driver, any GPU; None where cuda-compat steps in
    forward: tuple[str, ...]  # the branches cuda-compat runs it on, datacenter GPUs only; () without cuda-compat
    brands: tuple[str, ...]  # the datacenter brands (drivers.datacenter_brands)

    @property
    def compat_package(self) -> bool:
        """Whether the image carries cuda-compat (an nvidia/cuda base) and so runs under it on older drivers."""
        return self.minimum is None

    @property
    def min_driver(self) -> str:
        """The oldest driver it starts on with any GPU."""
        return self.minimum or self.native

    @property
    def variable(self) -> str:
        """NVIDIA_REQUIRE_CUDA, as nvidia/cuda writes it: `cuda>=X.Y` first (the term the toolkit's error message
        quotes, and what tools reading the variable take for the image's CUDA), then what else starts it."""
        if self.minimum:
            return f"cuda>={self.cuda} driver>={self.minimum}"
        clauses = [f"brand={brand},driver>={number},driver<{int(number) + 1}"
                   for number in self.forward for brand in self.brands]
        return " ".join([f"cuda>={self.cuda}", *clauses])

    def how(self, driver: str, brand: str | None, branches: Mapping[str, str]) -> str | None:
        """How the facts let `driver` start it on a GPU of `brand` (None: no GPU visible): NATIVE, MINOR, FORWARD;
        None: it does not."""
        cuda = driver_cuda(driver, branches)
        if cuda is not None and compare(cuda, self.cuda) >= 0:
            return NATIVE
        if self.minimum and compare(driver, self.minimum) >= 0:
            return MINOR
        if str(branch(driver)) in self.forward and (brand is None or brand.lower() in self.brands):
            return FORWARD
        return None

    def as_dict(self) -> dict:
        """expected.json's "driver" entry, versioned: the trainer checks the host's driver with it at start."""
        return {"format": REQUIREMENT_FORMAT, "cuda": self.cuda, "min_driver": self.min_driver,
                "datacenter_branches": list(self.forward), "compat_package": self.compat_package}


def native_branch(cuda: str, branches: Mapping[str, str]) -> str | None:
    """The oldest branch whose drivers support CUDA `cuda` (X.Y) themselves."""
    found = [number for number, supported in branches.items() if compare(supported, cuda) >= 0]
    return min(found, key=int) if found else None


def requirement(matrix: Matrix, cuda: str, compat: bool) -> DriverRequirement:
    """The requirement of an image whose CUDA libraries are the line `cuda` (a key of matrix.cuda), with the line's
    cuda-compat (an nvidia/cuda base) or without (NVIDIA's wheels, torch's)."""
    facts = matrix.cuda[cuda].driver
    return DriverRequirement(cuda=cuda, native=native_branch(cuda, matrix.drivers.branches) or "",
                             minimum=None if compat else facts.minimum,
                             forward=tuple(sorted(facts.forward, key=int)) if compat else (),
                             brands=tuple(matrix.drivers.datacenter_brands))


def fact_problems(matrix: Matrix) -> list[Problem]:
    """Driver facts that cannot all be true: a branch table going backwards, and per CUDA line a shipped driver, a
    minimum or a forward branch that does not fit the line."""
    branches = matrix.drivers.branches
    ordered = sorted(branches, key=int)
    problems = [matrix.problem(("drivers", "branches", newer), f"R{newer} is said to support CUDA {branches[newer]}, "
                               f"older than R{older}'s {branches[older]}: a newer branch supports what an older one "
                               "does", "driver-branch")
                for older, newer in zip(ordered, ordered[1:]) if compare(branches[newer], branches[older]) < 0]
    for cuda in matrix.cuda:
        problems += _line_problems(matrix, cuda)
    return problems


def _line_problems(matrix: Matrix, cuda: str) -> list[Problem]:
    facts, branches = matrix.cuda[cuda].driver, matrix.drivers.branches
    at = ("cuda", cuda, "driver")
    if not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        return [matrix.problem(("cuda", cuda), f"{cuda!r} is not a CUDA line such as \"12.8\"", "cuda-version")]
    if native_branch(cuda, branches) is None:
        return [matrix.problem(at, f"no branch of drivers.branches supports CUDA {cuda}: add the branch of the "
                               f"driver its toolkit ships ({facts.shipped})", "driver-branch")]
    problems = []
    shipped = driver_cuda(facts.shipped, branches)
    if shipped is None or compare(shipped, cuda) < 0:
        problems.append(matrix.problem((*at, "shipped"), f"{facts.shipped} is an R{branch(facts.shipped)} driver, "
                                       f"which supports CUDA {shipped}, not {cuda}: the toolkit ships a driver of its "
                                       "own CUDA (release notes: \"CUDA Toolkit and Corresponding Driver Versions\")",
                                       "driver-shipped"))
    least = driver_cuda(facts.minimum, branches)
    if least is None or least.split(".")[0] != cuda.split(".")[0] or compare(least, cuda) > 0:
        problems.append(matrix.problem((*at, "minimum"), f"{facts.minimum} is a CUDA {least} driver: minor-version "
                                       f"compatibility runs CUDA {cuda} on drivers of CUDA {cuda.split('.')[0]}.x "
                                       "alone, from the oldest its release notes name", "driver-minimum"))
    for index, number in enumerate(facts.forward):
        if number not in branches:
            problems.append(matrix.problem((*at, "forward", index), f"R{number} is not in drivers.branches: add the "
                                           "CUDA it supports", "driver-branch"))
        elif compare(branches[number], cuda) >= 0:
            problems.append(matrix.problem((*at, "forward", index), f"R{number} supports CUDA {branches[number]} "
                                           "itself: forward compatibility is for older branches", "driver-forward"))
    return problems


def just_below(driver: str) -> str:
    """A driver version right below `driver`: 525.60.12.99999 below 525.60.13, 579.99999 below 580."""
    numbers = [int(part) for part in driver.split(".")]
    last = max((index for index, number in enumerate(numbers) if number > 0), default=0)
    return ".".join(str(number) for number in [*numbers[:last], numbers[last] - 1]) + ".99999"


def disagreements(req: DriverRequirement, branches: Mapping[str, str], variable: str | None, said_min: str,
                  said_branches: tuple[str, ...]) -> list[str]:
    """Where what an image says differs from what its facts admit: its NVIDIA_REQUIRE_CUDA as the container toolkit
    reads it (None: it sets none), and its labels' oldest driver for any GPU and datacenter branches; [] when all
    agree. Asked of every branch the facts know, the requirement's own versions and the drivers just below them."""
    said = [value for value in (*said_branches, said_min) if is_version(value)]
    probes = sorted({*branches, *req.forward, req.min_driver, just_below(req.min_driver), *said,
                     *(just_below(value) for value in said)}, key=parts)
    if variable is None:
        return _labels_disagree(branches, lambda d, b: req.how(d, b, branches) is not None, "its facts admit",
                                said_min, said_branches)
    try:
        toolkit = {(d, b): admits([variable], d, b, branches) for d in probes for b in _gpus(req)}
    except RequirementError as error:
        return [f"the container toolkit cannot read its NVIDIA_REQUIRE_CUDA {variable!r}: {error}"]
    for (driver, brand), started in toolkit.items():
        how = req.how(driver, brand, branches)
        if started != (how is not None):
            return [f"its NVIDIA_REQUIRE_CUDA refuses driver {driver} on {brand} GPUs, which the facts admit ({how})"
                    if how else f"its NVIDIA_REQUIRE_CUDA admits driver {driver} on {brand} GPUs, which the facts "
                    "refuse"]
    return _labels_disagree(branches, lambda d, b: admits([variable], d, b, branches), "its NVIDIA_REQUIRE_CUDA admits",
                            said_min, said_branches)


def _labels_disagree(branches: Mapping[str, str], starts, what: str, said_min: str,
                     said_branches: tuple[str, ...]) -> list[str]:
    """The labels against `starts(driver, brand)`: the oldest driver for any GPU, and the branches that start it on
    datacenter GPUs alone."""
    found = []
    if not is_version(said_min) or not starts(said_min, OTHER) or starts(just_below(said_min), OTHER):
        found.append(f"its min-driver label says {said_min}, which is not the oldest driver {what} on any GPU")
    known = {*branches, *(number for number in said_branches if number.isdigit())}
    datacenter_only = tuple(number for number in sorted(known, key=int)
                            if starts(number, DATACENTER) and not starts(number, OTHER))
    if tuple(said_branches) != datacenter_only:
        found.append(f"its datacenter-branches label says {' '.join(said_branches) or 'none'}, but {what} "
                     f"{' '.join(datacenter_only) or 'no branch'} on datacenter GPUs alone")
    return found


def _gpus(req: DriverRequirement) -> tuple[str, ...]:
    """The brands a requirement is asked of: a datacenter GPU's and another's first, as messages name them."""
    return (DATACENTER, OTHER, *(brand for brand in req.brands if brand != DATACENTER))
