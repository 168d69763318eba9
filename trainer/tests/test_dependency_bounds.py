"""The trainer's dependency bounds span exactly the versions the images lock or pin (an image the PyTorch index locks
may have no lock here: its matrix pin counts), so `pip install ./trainer` outside an image cannot take a release no
image was tested with, and no image pins a version the trainer refuses."""

import json
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from conftest import REPO

LOCKS = sorted((REPO / "locks").glob("*.json"))
PYPROJECT = REPO / "trainer" / "pyproject.toml"
MATRIX = REPO / "matrix.yaml"
# Images without a lock here (only the PyTorch index can lock them) may need older versions than the locks hold
# (transformers 4.57.6's tokenizers): while there are any, a lower bound may reach below the lowest locked version.
UNLOCKED_IMAGES = [image["name"] for image in yaml.safe_load(MATRIX.read_text())["images"]
                   if not (REPO / "locks" / f"{image['name']}.json").is_file()]


def locked_versions() -> dict[str, list[tuple[Version, str]]]:
    """Distribution -> (version, where) for every platform of every lock."""
    found: dict[str, list[tuple[Version, str]]] = {}
    for lock in LOCKS:
        for platform, content in json.loads(lock.read_text())["platforms"].items():
            for package in content["packages"]:
                where = f"{lock.name} ({platform})"
                found.setdefault(canonicalize_name(package["name"]), []).append((Version(package["version"]), where))
    return found


def pinned_by_the_matrix() -> dict[str, list[tuple[Version, str]]]:
    """Distribution -> (version, image) for every component an image of matrix.yaml pins."""
    matrix = yaml.safe_load(MATRIX.read_text())
    distributions = {key: row["distribution"] for key, row in matrix["components"].items()
                     if row.get("distribution") and row.get("from", "image") == "image"}
    found: dict[str, list[tuple[Version, str]]] = {}
    for image in matrix["images"]:
        entry = {**matrix.get("defaults", {}), **image}
        for key, name in distributions.items():
            value = entry.get(key)
            version = value.get("version") if isinstance(value, dict) else value
            if version and version != "none":
                found.setdefault(canonicalize_name(name), []).append((Version(version), f"matrix.yaml {image['name']}"))
    return found


def spanned_versions() -> dict[str, list[tuple[Version, str]]]:
    found = locked_versions()
    for name, pins in pinned_by_the_matrix().items():
        found.setdefault(name, []).extend(pins)
    return found


def bounded_requirements() -> list[Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(text) for text in project["dependencies"] + extras["qlora"] + extras["lab"]]


def next_minor(version: Version) -> Version:
    return Version(f"{version.major}.{version.minor + 1}")


def bound_problems(requirement: Requirement, locked: list[tuple[Version, str]],
                   unlocked: list[str] = ()) -> list[str]:
    problems = [f"{requirement}: {where} locks {version}, outside the bound" for version, where in locked
                if not requirement.specifier.contains(version, prereleases=True)]
    lowest, highest = min(v for v, _ in locked), max(v for v, _ in locked)
    lower = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
    if not lower or (max(lower) < lowest and not unlocked):
        problems.append(f"{requirement}: the lower bound is looser than {lowest}, the lowest version a lock or an "
                        f"image pins; write >={lowest}")
    if requirement.specifier.contains(next_minor(highest), prereleases=True):
        problems.append(f"{requirement}: admits {next_minor(highest)}, newer than {highest}, the highest version a "
                        f"lock or an image pins; write <{next_minor(highest)}")
    return problems


@pytest.mark.skipif(not LOCKS, reason="no image locks next to the trainer (../locks/*.json)")
def test_every_dependency_is_bounded_by_the_versions_the_images_lock():
    locked = spanned_versions()
    requirements = bounded_requirements()
    assert {canonicalize_name(r.name) for r in requirements} & set(locked), "no dependency is locked: wrong lock shape?"
    problems = [problem for requirement in requirements if canonicalize_name(requirement.name) in locked
                for problem in bound_problems(requirement, locked[canonicalize_name(requirement.name)],
                                              UNLOCKED_IMAGES)]
    assert not problems, "\n".join(problems)


def test_the_bound_check_catches_a_loose_or_missed_bound():
    locked = [(Version("4.57.6"), "a.json"), (Version("5.24.0"), "b.json")]
    assert bound_problems(Requirement("transformers>=4.57.6,<5.25"), locked) == []
    assert "lower bound is looser than 4.57.6" in bound_problems(Requirement("transformers>=4.57,<5.25"), locked)[0]
    # an image without a lock may need older versions than any lock holds: its lock will tell
    assert bound_problems(Requirement("transformers>=4.57,<5.25"), locked, ["cu121-torch2.5"]) == []
    assert "b.json locks 5.24.0, outside the bound" in bound_problems(Requirement("transformers>=4.57.6,<5.24"),
                                                                       locked)[0]
    assert "admits 5.25" in bound_problems(Requirement("transformers>=4.57.6"), locked)[0]
