"""The shape of matrix.yaml through its pydantic models: every mistake one file:line: key: problem [rule] line."""

import pytest

from imagegen.core.errors import MatrixError
from imagegen.matrix import model as matrix_module
from imagegen.workspace import Workspace

from tests.helpers import FIXTURE_MATRIX, edited, image_named, parsed, problems_of, rules_broken


def parse_problems(text: str) -> list:
    with pytest.raises(MatrixError) as caught:
        matrix_module.parse(text, "m.yaml")
    return caught.value.problems


def test_a_key_written_twice_is_an_error_naming_both_lines():
    text = FIXTURE_MATRIX.read_text().replace("latest: cu128-torch2.8\n",
                                              "latest: cu128-torch2.8\nrepository: ghcr.io/other/vlm-grpo\n", 1)
    (problem,) = parse_problems(text)
    first = text.splitlines().index("repository: ghcr.io/imagegen/vlm-grpo") + 1
    second = text.splitlines().index("repository: ghcr.io/other/vlm-grpo") + 1
    assert (problem.line, problem.key, problem.rule) == (second, "repository", "duplicate-key")
    assert f"lines {first} and {second}" in problem.message


def test_a_key_written_twice_inside_an_image_is_found_too():
    text = FIXTURE_MATRIX.read_text().replace("  - name: cpu\n", "  - name: cpu\n    python: \"3.11\"\n", 1)
    problems = parse_problems(text)
    assert [p.rule for p in problems] == ["duplicate-key"] and problems[0].key == "images[7].python"


@pytest.mark.parametrize("name", ["../../elsewhere", "a/b", ".hidden", "-dash", "x" * 129, "sp ace"])
def test_an_image_name_that_is_no_tag_is_refused(name):
    problems = problems_of(edited(lambda d: image_named(d, "cpu").update(name=name)))
    assert [(p.key, p.rule) for p in problems] == [("images[7].name", "name")]
    assert "letters, digits" in problems[0].message


def test_no_lock_is_written_outside_the_locks_folder(tmp_path):
    from imagegen.core.errors import UserError

    with pytest.raises(UserError, match="outside"):
        Workspace(tmp_path / "matrix.yaml").lock_path("../../elsewhere")


def test_a_repository_must_be_an_image_repository():
    assert rules_broken(edited(lambda d: d.update(repository="GHCR.io/Acme/Bad Name"))) == {"name"}


def test_the_component_table_is_checked_first_and_names_its_mistakes():
    problems = problems_of(edited(lambda d: d["components"]["trl"].update(colour="blue")))
    assert [(p.key, p.rule) for p in problems] == [("components.trl.colour", "unknown-key")]
    assert "allowed keys: title, label, distribution, from" in problems[0].message
    problems = problems_of(edited(lambda d: d["components"]["trl"].update({"from": "nowhere"})))
    assert [(p.key, p.rule) for p in problems] == [("components.trl.from", "choice")]


def test_a_component_the_code_reads_by_key_cannot_go():
    problems = problems_of(edited(lambda d: d["components"].pop("cudnn")))
    assert [(p.key, p.rule) for p in problems] == [("components", "required-key")]
    assert "cudnn" in problems[0].message


def test_a_component_key_must_be_an_identifier():
    problems = problems_of(edited(lambda d: d["components"].update({"Liger-Kernel": {"title": "Liger"}})))
    assert [(p.key, p.rule) for p in problems] == [("components.Liger-Kernel", "name")]


def test_an_empty_value_is_reported_not_taken_as_unset():
    problems = problems_of(edited(lambda d: d["cuda"]["12.4"].update(platforms=None)))
    assert [(p.key, p.rule) for p in problems] == [("cuda.12.4.platforms", "type")]
    assert problems[0].message == "expected a list, got nothing (null)"


def test_an_either_shape_names_both_when_neither_fits():
    problems = problems_of(edited(lambda d: d["cuda"]["12.4"].update(archs=9)))
    assert [(p.key, p.rule) for p in problems] == [("cuda.12.4.archs", "type")]
    assert problems[0].message == "expected a list or a mapping with keys linux/amd64, linux/arm64, got int 9"


def test_a_per_platform_key_that_is_no_platform_is_unknown():
    problems = problems_of(edited(lambda d: d["cuda"]["12.4"].update(archs={"linux/riscv": ["9.0"]})))
    assert [(p.key, p.rule) for p in problems] == [("cuda.12.4.archs.linux/riscv", "unknown-key")]
    assert "allowed keys: linux/amd64, linux/arm64" in problems[0].message


def test_an_artifact_component_takes_a_version_or_a_build_mapping():
    problems = problems_of(edited(lambda d: image_named(d, "cpu").update(flash_attn={"version": "2.8.3",
                                                                                          "build": "nightly"})))
    assert [(p.key, p.rule) for p in problems] == [("images[7].flash_attn.build", "choice")]


def test_an_image_whose_torch_only_the_pytorch_index_serves_must_say_so():
    problems = problems_of(edited(lambda d: image_named(d, "cu128-torch2.7").pop("lock")))
    assert [(p.key, p.rule) for p in problems] == [("images[4].name", "lock-source")]
    assert "lock: pytorch-index" in problems[0].message
    problems = problems_of(edited(lambda d: image_named(d, "cpu").update(lock="pytorch-index")))
    assert [(p.key, p.rule) for p in problems] == [("images[7].lock", "lock-source")]


def test_the_validated_facts_are_the_model_with_their_defaults():
    """One model of the file: what the schema validated is what plan and rules read, defaults applied once."""
    def edit(data):
        data["torch"]["2.4.1"]["builds"]["12.4"] = {"nccl": "2.21.5", "platforms": ["linux/amd64", "linux/arm64"]}

    matrix = parsed(edited(edit))
    build = matrix.torch["2.4.1"].builds["12.4"]
    assert (build.cuda, build.cudnn, build.nccl, build.cxx11_abi, build.platforms) == (
        "12.4", "9.1.0.70", "2.21.5", False, ["linux/amd64", "linux/arm64"])  # the release's, where it says none
    assert matrix.torch["2.4.1"].builds["11.8"].platforms == ["linux/amd64"] and matrix.torch["2.4.1"].version == "2.4.1"
    one_list, per_platform = matrix.cuda["11.8"], matrix.cuda["12.4"]
    assert (one_list.minor, one_list.platforms, one_list.archs_by_platform["linux/amd64"][-1]) == (
        "11.8", ["linux/amd64"], "9.0")
    assert per_platform.archs_by_platform == {"linux/amd64": ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0"),
                                              "linux/arm64": ("9.0",)}
    assert per_platform.base.devel.endswith("-cudnn-devel-ubuntu22.04") and per_platform.driver.minimum == "525.60.13"
