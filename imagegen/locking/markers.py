"""PEP 508 markers as an image's Python on Linux evaluates them, and requirement lines parsed once each."""

from __future__ import annotations

import re
from functools import lru_cache

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


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


_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


@lru_cache(maxsize=None)
def applicable(requires: tuple[str, ...], python: str, machine: str) -> tuple[tuple[int, str, frozenset | None], ...]:
    """Of a package's requirement lines, each that may hold there: (its number, the line, None where it holds whatever
    extras are asked, else the extras, canonical, its marker names: `holds` says under which it does). Once per
    package and place, however many locks hold the package; a line that is no requirement is kept, for the walk to
    say so. A marker that names an extra is evaluated only when one of its extras is asked (most are `dev`, `test`)."""
    found = []
    for number, line in enumerate(requires):
        requirement = parsed(line)
        named = frozenset(canonicalize_name(extra) for extra in _EXTRA.findall(line))
        # A marker naming an extra holds without it only through an `or` (`extra == "x" or python_version < "3.12"`)
        if requirement is None or ((not named or " or " in line) and line_applies(line, python, machine)):
            found.append((number, line, None))
        elif named:
            found.append((number, line, named))
    return tuple(found)


def holds(line: str, python: str, machine: str, extras: frozenset, asked: set) -> bool:
    """Whether a line `applicable` kept holds with these extras asked."""
    return any(line_applies(line, python, machine, extra) for extra in extras & asked)
