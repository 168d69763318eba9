"""The real matrix's locked images, checked by what must hold of every one rather than by snapshots: every lock makes
an image that renders; each image is three layers, each on the one below; its labels say its lock and its matrix entry;
its version tag follows the tag format; its expected.json names exactly its components. The snapshots
(tests/test_render.py) render the tests' fixture matrix, so a change to matrix.yaml rewrites none of them.

Each expectation is read from matrix.yaml's raw YAML and the lock files, not from the planned image, so that a
planning mistake shows here.
"""

from __future__ import annotations

import functools
import json
import re

import pytest
import yaml
from packaging.utils import canonicalize_name

from imagegen.render.locked import LockedImage
from imagegen.workspace import Workspace

from tests.helpers import MATRIX_PATH, REPO

LAYERS = ["base", "framework", "trainer"]


@functools.lru_cache(maxsize=1)
def real_images() -> tuple[LockedImage, ...]:
    return tuple(Workspace().load().locked.values())


@functools.lru_cache(maxsize=1)
def raw_matrix() -> dict:
    return yaml.safe_load(MATRIX_PATH.read_text())


def raw_entry(data: dict, name: str) -> dict:
    """The image's entry as the matrix's YAML says it, its defaults applied."""
    return {**data.get("defaults", {}), **next(image for image in data["images"] if image["name"] == name)}


def first_from(dockerfile: str) -> str:
    return re.search(r"^FROM (\S+)", dockerfile, re.MULTILINE).group(1)


def expected_json(image: LockedImage) -> dict:
    framework = next(c for c in image.contexts if c.layer == "framework")
    return json.loads(framework.files["expected.json"])


def test_every_lock_makes_a_locked_image_that_renders():
    locks = {path.stem for path in (REPO / "locks").glob("*.json")}
    images = real_images()
    assert locks and {image.name for image in images} == locks
    for image in images:
        assert set(image.platforms) == {i.platform for i in images if i.name == image.name}, image.key


def three_layers_each_on_the_one_below(image: LockedImage, data: dict) -> None:
    assert [c.layer for c in image.contexts] == LAYERS
    base, framework, trainer = image.contexts
    assert {c.image for c in image.contexts} == {image.key}
    assert first_from(base.dockerfile) == image.lock.base.pinned_ref
    assert first_from(framework.dockerfile) == base.ref and first_from(trainer.dockerfile) == framework.ref
    assert trainer.parent == framework.ref and framework.parent == base.ref


def labels_say_the_lock_and_the_matrix_entry(image: LockedImage, data: dict) -> None:
    labels, entry, rows = image.labels, raw_entry(data, image.name), data["components"]
    assert labels["io.imagegen.image"] == image.name
    assert labels["org.opencontainers.image.version"] == image.version_tag
    assert labels["io.imagegen.inputs"] == image.inputs_digest
    assert labels["org.opencontainers.image.base.name"] == image.lock.base.pinned_ref
    pinned = {canonicalize_name(p.name): p.version for p in image.lock.packages}
    for key, value in entry.items():
        if key not in rows or rows[key].get("from") == "torch":
            continue
        version = value["version"] if isinstance(value, dict) else value
        label = labels[f"io.imagegen.{rows[key].get('label', key)}"]
        assert label == str(version), f"{key}: the label says {label}, matrix.yaml {version}"
        distribution = rows[key].get("distribution")
        if distribution and version != "none" and not rows[key].get("artifact"):
            assert pinned[canonicalize_name(distribution)] == str(version), f"{key}: the lock pins another"


def version_tag_follows_the_tag_format(image: LockedImage, data: dict) -> None:
    """<trainer>-torch<torch>-cu<cuda>-cudnn<major>-py<python>[-<key><version>...][-runtime][-<os>]-<digest>, the
    components marked in_name named where the image has them."""
    entry, rows = raw_entry(data, image.name), data["components"]
    named = "".join(f"-{key}{entry[key]}" for key in rows
                    if rows[key].get("in_name") and entry.get(key) not in (None, "none"))
    pattern = (rf"{re.escape(image.plan.trainer.version)}-torch{re.escape(str(entry['torch']))}-cu\d{{3}}-cudnn\d+"
               rf"-py{re.escape(str(entry['python']))}{re.escape(named)}(-runtime)?(-[a-z]+\d+)?"
               rf"-{image.inputs_digest.removeprefix('sha256:')[:12]}")
    assert re.fullmatch(pattern, image.version_tag), f"{image.version_tag} !~ {pattern}"


def expected_json_names_exactly_its_components(image: LockedImage, data: dict) -> None:
    """The components the image's entry names (its defaults too) and those torch decides; none other."""
    expected, entry, rows = expected_json(image), raw_entry(data, image.name), data["components"]
    keys = [key for key, row in rows.items() if key in entry or row.get("from") == "torch"]
    assert sorted(expected["versions"]) == sorted(keys)  # expected.json is written with its keys sorted
    assert expected["labels"] == {key: rows[key].get("label", key) for key in keys}
    assert expected["distributions"] == {key: rows[key]["distribution"] for key in keys if "distribution" in rows[key]}
    assert expected["in_name"] == [key for key in keys if rows[key].get("in_name")]
    assert expected["versions"] == dict(image.versions)


INVARIANTS = (three_layers_each_on_the_one_below, labels_say_the_lock_and_the_matrix_entry,
              version_tag_follows_the_tag_format, expected_json_names_exactly_its_components)


def holds_every_invariant(image: LockedImage, data: dict) -> None:
    """What tests/test_real_images.py checks of each locked image of the real matrix, for `data`'s image."""
    for invariant in INVARIANTS:
        invariant(image, data)


@pytest.mark.parametrize("invariant", INVARIANTS, ids=lambda invariant: invariant.__name__)
@pytest.mark.parametrize("image", real_images(), ids=lambda image: image.key)
def test_every_locked_image_of_the_real_matrix_holds(image, invariant):
    invariant(image, raw_matrix())
