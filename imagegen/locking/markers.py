"""PEP 508 markers as an image's Python on Linux evaluates them, and requirement lines parsed once each."""

from __future__ import annotations

from functools import lru_cache

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement


def environment(python: str, machine: str = "x86_64", extra: str = "") -> dict[str, str]:
    """The marker environment of an image's Python on Linux (as uv resolves for `--python-version`: its .0)."""
    return {"python_version": python, "python_full_version": f"{python}.0", "platform_machine": machine,
            "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix", "extra": extra,
            "implementation_name": "cpython", "implementation_version": f"{python}.0",
            "platform_python_implementation": "CPython", "platform_release": "", "platform_version": ""}


def applies(requirement: Requirement, env: dict[str, str]) -> bool:
    try:
        return requirement.marker is None or requirement.marker.evaluate(env)
    except UndefinedEnvironmentName:
        return False


@lru_cache(maxsize=None)
def parsed(line: str) -> Requirement | None:
    """A requirement line, parsed once however many locks repeat it; None when it is not one."""
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


@lru_cache(maxsize=None)
def line_applies(line: str, python: str, machine: str, extra: str = "") -> bool:
    """Whether a requirement line's marker holds there: evaluated once however many locks and parents repeat it."""
    requirement = parsed(line)
    return requirement is not None and applies(requirement, environment(python, machine, extra))
