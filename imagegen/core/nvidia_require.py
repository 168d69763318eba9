"""Whether the NVIDIA container toolkit starts an image on a host: its NVIDIA_REQUIRE_* variables read as the
toolkit reads them. Pure: the variables, the host's driver version and GPU brand, and which CUDA each driver branch
supports (matrix.yaml's `drivers.branches`) in; yes or no out.

The semantics are libnvidia-container's (src/cli/dsl.c, dsl_evaluate and dsl_compare_version; src/cli/configure.c,
check_*), which nvidia-container-toolkit's Go requirements repeat (internal/requirements/constraints/factory.go:
"space-separated constraints being ORed together and comma-separated constraints being ANDed together"):
  - one variable is terms separated by spaces, any of which may hold (OR); a term is constraints separated by
    commas, all of which must hold (AND);
  - every NVIDIA_REQUIRE_* variable (NVIDIA_REQUIRE_JETPACK aside) is passed as one --require, and each must hold
    (AND): internal/config/image/cuda_image.go, GetRequirements;
  - `cuda` compares the CUDA version the driver supports (what cuDriverGetVersion reports, "12.4" for an R550
    driver), `driver` the driver's own version (NVRM, "550.54.15"), `brand` NVML's brand name of the GPU,
    case-insensitively ("tesla", "geforce"); with no GPU visible a `brand` or `arch` constraint holds;
  - versions compare number by number, missing numbers counting as 0 ("535" == "535.0", "535.104.05" > "535").
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Mapping

# How versions read and order is the contract's: the image's start-up check (vlmgrpo.image.driver) compares with the same.
from imagegen_contract.driver import UnreadableVersion, branch, compare

OPERATORS = ("!=", "<=", ">=", "=", "<", ">")  # dsl.c's operators, the two-character ones tried first
PROPERTIES = ("cuda", "driver", "arch", "brand")  # what libnvidia-container evaluates; anything else is an error


class RequirementError(ValueError):
    """A variable the toolkit refuses to read ("invalid expression"): the container would not start at all."""


def driver_cuda(driver: str, branches: Mapping[str, str]) -> str | None:
    """The CUDA version a driver supports, as the facts (branch -> CUDA) say: its branch's, or, for a branch the facts
    do not list, that of the newest listed branch below it (a newer branch never supports an older CUDA, so this is
    what it supports at least). None: older than every listed branch."""
    below = [known for known in branches if int(known) <= branch(driver)]
    return branches[max(below, key=int)] if below else None


def _holds(name: str, operator: str, value: str, driver: str, cuda: str | None, brand: str | None) -> bool:
    if name == "brand":
        if brand is None:
            return True  # configure.c: "No device is visible, assume the brand is ok"
        equal = brand.lower() == value.lower()
        if operator not in ("=", "!="):
            raise RequirementError(f"brand compares with = or != only, not {operator}")
        return equal if operator == "=" else not equal
    if name == "arch":
        return True  # no GPU model here: the matrix's images never constrain it
    found = driver if name == "driver" else cuda
    if found is None:
        return False  # older than every branch the facts know: it supports no CUDA the matrix has
    order = compare(found, value)
    return {"=": order == 0, "!=": order != 0, "<": order < 0, "<=": order <= 0, ">": order > 0,
            ">=": order >= 0}[operator]


def _constraint(text: str) -> tuple[str, str, str]:
    """(property, operator, value) of one constraint such as driver>=535."""
    match = re.fullmatch(r"([a-z]+)([<>=!]+)(.+)", text.strip(), re.IGNORECASE)
    if not match or match.group(2) not in OPERATORS or match.group(1).lower() not in PROPERTIES:
        raise RequirementError(f"{text!r} is not a constraint the toolkit reads (property: {', '.join(PROPERTIES)}; "
                               f"operator: {' '.join(OPERATORS)})")
    return match.group(1).lower(), match.group(2), match.group(3)


@functools.lru_cache(maxsize=1024)  # validate reads each image's variable once per probed (driver, brand) pair
def terms(variable: str) -> tuple[tuple[tuple[str, str, str], ...], ...]:
    """A variable as its terms (ORed), each constraints (ANDed); refused where the toolkit refuses it."""
    return tuple(tuple(_constraint(part) for part in term.split(",") if part) for term in variable.split(" ") if term)


def admits(variables: Iterable[str], driver: str, brand: str | None, branches: Mapping[str, str]) -> bool:
    """Whether the toolkit starts a container with these NVIDIA_REQUIRE_* values on a GPU of `brand` (None: no GPU
    visible) under `driver`, the driver's CUDA version derived from its branch by the facts."""
    try:
        cuda = driver_cuda(driver, branches)
        for variable in variables:
            read = terms(variable)
            if read and not any(all(_holds(*constraint, driver, cuda, brand) for constraint in term) for term in read):
                return False
    except UnreadableVersion as error:  # a version the toolkit cannot read makes the whole variable unreadable
        raise RequirementError(str(error)) from None
    return True
