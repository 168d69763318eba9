"""Known-bad combinations: what users and upstream issues reported broken, matched against each image.

An entry names a version range per component (`transformers: ">=5.0,<=5.5.3"`, `torch: ">=2.9,<2.10"`,
`cudnn: "<9.15"`: the cuDNN torch's wheels pin), what else the image must have (`with`), why, and the upstream
issues. An image inside every range, with that, is refused (`[known-bad]`), or warned where the entry says
`warn: true`.
"""

from __future__ import annotations

from typing import Callable

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagegen.core.errors import Problem
from imagegen.matrix.model import ImageEntry, KnownBad, Matrix

# What `with` asks of an image. Every image carries the trainer, vlmgrpo, whose models are Qwen2-VL, Qwen2.5-VL
# and Qwen3-VL (trainer/src/vlmgrpo/models/loading.py): each of them runs Qwen-VL models.
WITH: dict[str, Callable[[ImageEntry], bool]] = {
    "deepspeed": lambda image: bool(image.versions.get("deepspeed")),
    "qwen-vl": lambda image: True,
}


def fact_problems(matrix: Matrix) -> list[Problem]:
    """Each entry names at least one component, and each range parses."""
    problems = []
    for bad in matrix.known_bad:
        if not bad.ranges:
            problems.append(matrix.problem(("known_bad", bad.index), "names no component: give a version range of "
                                           f"one or more of {', '.join(matrix.components.keys)}", "version-range"))
        for key, text in bad.ranges.items():
            if _specifier(text) is None:
                problems.append(matrix.problem(("known_bad", bad.index, key), f"{text!r} is not a version range",
                                               "version-range"))
    return problems


def matches(matrix: Matrix, image: ImageEntry, versions: dict[str, str | None], warned: bool) -> list[Problem]:
    """The entries (refused ones, or warned ones) the image's versions fall in, one problem each."""
    found = []
    for bad in matrix.known_bad:
        if bad.warn != warned or not bad.ranges or (bad.with_component and not WITH[bad.with_component](image)):
            continue
        if all(_within(versions.get(key), text) for key, text in bad.ranges.items()):
            found.append(_problem(matrix, image, bad, versions))
    return found


def _problem(matrix: Matrix, image: ImageEntry, bad: KnownBad, versions: dict[str, str | None]) -> Problem:
    first = next(iter(bad.ranges))
    key = first if first in matrix.located.data["images"][image.index] or first in image.versions else "name"
    has = " with ".join(f"{k} {versions.get(k)}" for k in bad.ranges) + (f" and {bad.with_component}"
                                                                         if bad.with_component else "")
    issues = f" ({', '.join(bad.issues)})" if bad.issues else ""
    outside = " or ".join(f"{k} outside {text}" for k, text in bad.ranges.items())
    return matrix.problem(("images", image.index, key), f"{has} is known bad: {bad.reason}{issues}; allowed: "
                          f"{outside}", "known-bad")


def _within(version: str | None, text: str) -> bool:
    spec = _specifier(text)
    if not version or spec is None:
        return False
    try:
        return spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _specifier(text: str) -> SpecifierSet | None:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None
