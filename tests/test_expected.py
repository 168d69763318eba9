"""expected.json: one definition of its format and shape (imagegen_contract.expected) for its writer
(imagegen.render.expected), its readers on the host and the trainer's standard-library reader inside the image."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from imagegen.render import expected
from imagegen_contract import expected as contract
from imagegen_contract import inventory

from tests.helpers import check_runner, locked_images


def test_the_trainer_reads_the_format_imagegen_writes():
    # The inventory program runs as text alone inside images, so it holds the number itself; the contract names it.
    assert inventory.EXPECTED_FORMAT == contract.FORMAT == expected.FORMAT


@pytest.mark.parametrize("image", locked_images(), ids=lambda image: image.key)
def test_the_rendered_file_reads_back_as_written_on_both_sides(image, tmp_path):
    framework = next(c for c in image.contexts if c.layer == "framework")
    text = framework.files["expected.json"].decode()
    assert json.loads(text)["format"] == expected.FORMAT
    assert expected.Expected.model_validate_json(text) == image.expected()
    assert expected.of_inventory({"expected": json.loads(text)}) == image.expected()
    assert contract.problems(json.loads(text)) == []  # the shape the image's standard-library reader checks
    (tmp_path / "expected.json").write_text(text)
    assert inventory.read_expected(str(tmp_path / "expected.json")) == (json.loads(text), None)
    assert contract.read(str(tmp_path / "expected.json")) == (json.loads(text), None)


def test_another_format_is_refused_on_both_sides(tmp_path):
    newer = {"format": expected.FORMAT + 1, "versions": {"torch": "2.14.1"}}
    with pytest.raises(ValidationError, match="format"):
        expected.Expected.model_validate(newer)
    (tmp_path / "expected.json").write_text(json.dumps(newer))
    content, problem = inventory.read_expected(str(tmp_path / "expected.json"))
    assert content == {} and f"this trainer reads format {expected.FORMAT}" in problem


DRIVER = {"format": 1, "cuda": "12.8", "min_driver": "570", "datacenter_branches": ["535"], "compat_package": True}


@pytest.mark.parametrize("document, says", [
    ({"versions": {"torch": 2}}, "versions: not an object of component key -> version or null"),
    ({"distributions": {}}, "versions: missing"),
    ({"versions": {}, "min_driver": "580"}, "min_driver: not a key of it"),
    ({"versions": {}, "gpu_count": "all"}, "gpu_count: not a number of GPUs or null"),
    ({"versions": {}, "cuda_archs": "9.0"}, "cuda_archs: not a list of compute capabilities"),
    ({"versions": {}, "driver": {**DRIVER, "compat_package": "maybe"}}, "driver.compat_package: not true or false"),
    ({"versions": {}, "driver": {k: v for k, v in DRIVER.items() if k != "cuda"}}, "driver.cuda: missing"),
    (["versions"], "the file: not an object"),
])
def test_a_file_imagegen_would_not_write_is_refused_on_both_sides(document, says, tmp_path):
    with pytest.raises(ValidationError):
        expected.Expected.model_validate(document)
    assert says in contract.problems(document)
    (tmp_path / "expected.json").write_text(json.dumps(document))
    content, problem = contract.read(str(tmp_path / "expected.json"))
    assert content == {} and problem


def test_a_file_of_an_image_rendered_before_the_format_was_written_is_format_1(tmp_path):
    older = {"versions": {"torch": "2.14.1"}, "labels": {"torch": "torch"}}
    assert expected.Expected.model_validate(older).format == 1
    (tmp_path / "expected.json").write_text(json.dumps(older))
    assert inventory.read_expected(str(tmp_path / "expected.json")) == (older, None)


def test_a_file_of_another_shape_fails_the_check_that_reads_it_with_where():
    from imagegen.stages.checks import inside_versions
    from imagegen.stages.checks.context import Context

    facts = {"platform": "linux/amd64", "labels": {"io.imagegen.torch": "2.14.1"}}
    found = {"versions": {}, "version_checks": [], "expected": {"versions": {}, "labels": ["torch"]}}
    context = Context("repo:tag", None, facts, None, False, False, "", False, False, "", check_runner(),
                      _inventory=found)
    (check,) = inside_versions.run(context)
    assert check.status == "fail" and "labels: Input should be a valid dictionary" in check.detail
