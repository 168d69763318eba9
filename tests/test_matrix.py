"""Loading matrix.yaml and every validation rule, each with a matrix broken on purpose."""

import pytest
import yaml

from imagegen.matrix import model as matrix_module
from imagegen.matrix import model, rules
from imagegen.core.errors import MatrixError

from tests.helpers import (FIXTURE_MATRIX, MATRIX_PATH, TRAINER, edited, fixture_data, image_named, planned,
                           problems_of, rules_broken)


def test_the_fixture_matrix_resolves_to_every_image():
    names = [plan.name for plan in planned()]
    assert "cpu" in names
    cudas = {plan.gpu.cuda_minor for plan in planned() if plan.gpu.cuda_minor}
    assert {"11.8", "12.1", "12.4", "12.6", "12.8", "13.0"} <= cudas


def test_errors_name_file_line_and_key():
    text = FIXTURE_MATRIX.read_text() + "colour: blue\n"
    with pytest.raises(MatrixError) as caught:
        matrix_module.parse(text, "m.yaml")
    (problem,) = caught.value.problems
    line = FIXTURE_MATRIX.read_text().count("\n") + 1
    assert (problem.file, problem.line, problem.key, problem.rule) == ("m.yaml", line, "colour", "unknown-key")
    assert "allowed keys: repository, latest, components" in problem.message


def test_yaml_syntax_error_has_a_line():
    with pytest.raises(MatrixError) as caught:
        matrix_module.parse("repository: r\nimages: [\n", "m.yaml")
    assert caught.value.problems[0].rule == "yaml"


# A kilobyte of YAML whose aliases expand to a billion strings (nine levels of nine), and nesting 50,000 deep.
BILLION_LAUGHS = "".join(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9) if n else ', '.join(['lol'] * 9)}]\n"
                         for n in range(10))
DEEP = "images: " + "[" * 50_000 + "]" * 50_000 + "\n"


@pytest.mark.parametrize("content, says", [
    (BILLION_LAUGHS.encode(), ":5: (aliases): aliases expand to more than 10,000 nodes (*l3 alone is 7,381); write "
                              "the values out [yaml]"),
    (DEEP.encode(), ":1: (syntax): not valid YAML: exceeded maximum nesting depth [yaml]"),
    ("".join(f"{'  ' * n}k{n}:\n" for n in range(200)).encode(), ":101: (nesting): nested deeper than 100 levels "
                                                                 "[yaml]"),
    (b"a: &a [1, *a]\n", ":1: (aliases): the alias *a stands inside its own anchor [yaml]"),
    (b"repository: r\n# caf\xe9\n", ":2: (encoding): not UTF-8: byte 0xe9 at column 6; save the file as UTF-8 "
                                     "[yaml]"),
    # issue 53, item 19: a NUL on line 706 was reported at line 1
    (b"repository: r\n" * 705 + b"x: a\x00b\n", ":706: (syntax): character U+0000 at column 5 is not allowed in YAML; "
                                                  "remove it [yaml]"),
    # A merge key, which the trainer's reader refuses as not valid YAML too, was a traceback
    (b"base: &b\n  python: '3.11'\nimages:\n  - <<: *b\n", ":4: (syntax): not valid YAML: could not determine a "
                                                          "constructor for the tag 'tag:yaml.org,2002:merge' [yaml]"),
])
def test_a_matrix_past_the_yaml_bounds_is_one_line_at_once(tmp_path, content, says):
    """Refused from the parser's events before anything is built: no second, no memory, no traceback."""
    import resource
    import time

    from tests.test_cli import imagegen

    path = tmp_path / "matrix.yaml"
    path.write_bytes(content)
    started, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = imagegen("validate", "--matrix", str(path))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # kB: what the process's peak grew by
    assert time.monotonic() - started < 5 and grown < 256 * 1024
    assert result.returncode == 2 and result.stderr == f"error: {path}{says}\n"


def test_unquoted_version_read_as_a_number_is_explained():
    problems = problems_of(edited(lambda d: image_named(d, "cpu").update(python=3.10)))
    assert [p.rule for p in problems] == ["type"]
    assert "quote it" in problems[0].message and problems[0].key == "images[7].python"


@pytest.mark.parametrize("edit, rule", [
    (lambda d: image_named(d, "cpu").update(gpus=8), "unknown-key"),
    (lambda d: d["cuda"]["12.4"].pop("archs"), "required-key"),
    (lambda d: d["cuda"]["12.4"].update(cudnn="nine"), "type"),
    (lambda d: image_named(d, "cpu").update(flavor="tiny"), "choice"),
    (lambda d: image_named(d, "cu124-torch2.6").update(cuda="9.9"), "known-cuda"),
    (lambda d: image_named(d, "cu124-torch2.6").update(torch="3.0.0"), "known-torch"),
    (lambda d: image_named(d, "cu126-torch2.7").update(torch="2.5.1", transformers="4.57.6", lock="pytorch-index",
                                                       flash_attn="none"), "torch-cuda-build"),
    (lambda d: image_named(d, "cu124-torch2.6").update(python="3.8"), "python-in-torch-range"),
    (lambda d: image_named(d, "cpu").update(python="3.12"), "python-source"),
    (lambda d: image_named(d, "cu128-torch2.8").update(flash_attn="2.6.3"), "flash-attn-wheel"),
    (lambda d: image_named(d, "cu128-torch2.8").update(flash_attn="9.9.9"), "flash-attn-wheel"),
    (lambda d: image_named(d, "cu130-torch2.11").update(flavor="runtime"), "flash-attn-source-needs-devel"),
    (lambda d: image_named(d, "cu124-torch2.6").update(torchvision="0.20.1"), "torchvision-matches-torch"),
    (lambda d: image_named(d, "cu124-torch2.6").update(transformers="5.3.0"), "known-bad"),
    (lambda d: image_named(d, "cu124-torch2.6").update(transformers="5.1.0"), "known-bad"),
    (lambda d: image_named(d, "cu121-torch2.5").update(transformers="5.24.0"), "package-torch"),
    (lambda d: image_named(d, "cu124-torch2.6").update(python="3.10"), "package-python"),
    (lambda d: image_named(d, "cu124-torch2.6").update(peft="0.21.3"), "package-facts"),
    (lambda d: d["packages"]["trl"]["1.16.0"].update(python="three"), "python-range"),
    # cu124-torch2.6's torch build has the pre-C++11 ABI; a package whose compiled code has the other cannot load
    (lambda d: d["packages"]["peft"]["0.21.2"].update(cxx11_abi=True), "package-abi"),
    (lambda d: image_named(d, "cpu").update(name="cu124-torch2.6"), "unique-name"),
    (lambda d: d.update(latest="nope"), "known-image"),
    (lambda d: image_named(d, "cpu").update(transformers="5"), "exact-version"),
    (lambda d: image_named(d, "cpu").pop("os"), "known-os"),
    (lambda d: image_named(d, "cpu").pop("base"), "base-image"),
    (lambda d: d["torch"]["2.6.0"].update(python="three"), "python-range"),
    (lambda d: d["torch"]["2.6.0"].update(pypi_build="10.0"), "pypi-build"),
    (lambda d: d["cuda"]["12.4"].update(version="12.5.0"), "cuda-version"),
])
def test_each_rule_rejects_its_bad_matrix(edit, rule):
    assert rule in rules_broken(edited(edit))


def test_a_package_abi_names_the_image_the_torch_build_and_the_way_out():
    problems = problems_of(edited(lambda d: d["packages"]["peft"]["0.21.2"].update(cxx11_abi=True)))
    abi = [p for p in problems if p.rule == "package-abi"]
    assert abi and all(p.key.endswith(".peft") for p in abi)
    assert any(p.message.endswith("peft 0.21.2 loads code built with the C++11 ABI into torch, and torch 2.6.0's CUDA "
                                  "12.4 build has the pre-C++11 ABI: pick a torch build with the C++11 ABI, or set "
                                  "peft: none") for p in abi), [p.message for p in abi]


def test_transformers_5_1_reports_both_known_bad_entries_with_reasons():
    problems = problems_of(edited(lambda d: image_named(d, "cu124-torch2.6").update(transformers="5.1.0")))
    reasons = [p.message for p in problems if p.rule == "known-bad"]
    assert len(reasons) == 2 and any("deepspeed extra" in r for r in reasons)


def test_a_source_build_opts_out_of_the_wheel_rule():
    data = edited(lambda d: image_named(d, "cu128-torch2.8").update(
        flash_attn={"version": "2.6.3", "build": "source"}))
    assert problems_of(data) == []


def test_inherited_key_points_at_defaults():
    problems = problems_of(edited(lambda d: d["defaults"].update(transformers="5.3.0")))
    assert problems and all(p.key == "defaults.transformers" for p in problems)
    assert any("inherited by image cu124-torch2.6" in p.message for p in problems)


def test_all_problems_are_reported_at_once():
    def break_twice(d):
        image_named(d, "cpu").update(python="3.12")
        image_named(d, "cu124-torch2.6").update(torchvision="0.1.0")
    assert {"python-source", "torchvision-matches-torch"} <= rules_broken(edited(break_twice))


def test_the_trainers_requirements_must_accept_each_images_pins():
    from packaging.requirements import Requirement

    from imagegen.matrix import model as matrix_module
    from imagegen.matrix import plan

    trainer = plan.Trainer("0.1.0", (Requirement("transformers>=5.0"), Requirement("trl>=1.0")))
    with pytest.raises(MatrixError) as caught:
        plan.resolve(matrix_module.read(FIXTURE_MATRIX), trainer)
    (problem,) = caught.value.problems
    assert (problem.key, problem.rule) == ("images[1].transformers", "trainer-requirements")
    assert problem.message == "the trainer requires transformers>=5.0, the image pins 4.57.6"


def test_a_python_below_a_packages_floor_is_refused_with_the_package_named():
    problems = problems_of(edited(lambda d: image_named(d, "cu118-torch2.6").update(python="3.10")))
    assert {p.key for p in problems if p.rule == "package-python"} == {"images[0].python"}
    messages = {p.message for p in problems if p.rule == "package-python"}
    assert "transformers 5.24.0 requires Python >=3.11, the image has 3.10; pick another Python or another " \
           "transformers" in messages
    assert any(m.startswith("trl 1.16.0 requires Python >=3.11") for m in messages)


def test_torch_2_6_on_cuda_12_6_takes_the_cxx11_abi_wheel():
    from imagegen.matrix import model as matrix_module
    from imagegen.matrix import plan
    import yaml

    def cu126_torch26(d):
        image_named(d, "cu126-torch2.7").update(torch="2.6.0", python="3.11", flash_attn="2.7.4.post1",
                                                lock="pytorch-index")

    data = edited(cu126_torch26)
    assert problems_of(data) == []
    chosen = next(p for p in plan.resolve(matrix_module.parse(yaml.safe_dump(data), "m.yaml"), TRAINER)
                  if p.name == "cu126-torch2.7")
    assert chosen.torch.cxx11_abi and "cu12torch2.6cxx11abiTRUE-cp311" in chosen.kernels.flash_attn_wheel_url


def test_a_flash_attn_release_without_wheels_of_the_builds_abi_is_refused():
    def only_old_abi(d):
        image_named(d, "cu126-torch2.7").update(torch="2.6.0", python="3.11", flash_attn="2.7.4.post1")
        d["flash_attn"]["2.7.4.post1"]["cxx11_abi"] = [False]

    (problem,) = [p for p in problems_of(edited(only_old_abi)) if p.rule == "flash-attn-wheel"]
    assert "the C++11 ABI of torch 2.6.0's CUDA 12.6 build (its wheels: pre-C++11 ABI)" in problem.message


def test_a_flash_attn_release_covers_the_torch_releases_its_wheels_for_that_cuda_major_cover():
    """flash-attn 2.8.3's CUDA 13 wheels cover torch 2.9 and 2.10, its CUDA 12 ones 2.4 to 2.9: one list per major."""
    def narrowed(cuda12):
        return lambda d: d["flash_attn"]["2.8.3"].update(torch_by_cuda={"12": cuda12, "13": ["2.9", "2.10"]})

    assert "flash-attn-wheel" not in rules_broken(edited(narrowed(["2.7", "2.8", "2.9"])))
    refused = {p.message.split(" has no prebuilt wheel for ")[1].split(". ")[0]
               for p in problems_of(edited(narrowed(["2.9"]))) if p.rule == "flash-attn-wheel"}
    assert refused == {"torch 2.7 (covered on CUDA 12: 2.9)", "torch 2.8 (covered on CUDA 12: 2.9)"}


def test_max_size_is_read_in_bytes_and_a_bad_one_is_a_size_problem():
    data = edited(lambda d: image_named(d, "cpu").update(max_size="6.5GiB"))
    assert problems_of(data) == []
    [problem] = problems_of(edited(lambda d: image_named(d, "cpu").update(max_size="seven gigs")))
    assert (problem.key, problem.rule) == ("images[7].max_size", "size")
    assert "'seven gigs' is not a size" in problem.message and '"7GB"' in problem.message
    assert next(p for p in planned() if p.name == "cpu").max_size is None


def conv3d_matrix(edit):
    """The tests' matrix with the real matrix's known-bad entry for Qwen-VL's Conv3d on torch 2.9 and cuDNN < 9.15,
    and an image on torch 2.9.1's CUDA 12.8 build (cuDNN 9.10.2.21), after an edit."""
    real = yaml.safe_load(MATRIX_PATH.read_text())
    (entry,) = [bad for bad in real["known_bad"] if bad.get("with") == "qwen-vl"]
    data = fixture_data()
    data["known_bad"].append(entry)
    data["images"] = [{**image_named(data, "cu128-torch2.8"), "name": "cu128-torch2.9", "torch": "2.9.1",
                       "flash_attn": {"version": "2.8.3", "build": "source"}}]
    data["latest"] = "cu128-torch2.9"
    edit(data)
    return model.parse(yaml.safe_dump(data, sort_keys=False), "matrix.yaml")


def test_torch_2_9_below_cudnn_9_15_is_warned_with_the_issues_not_refused():
    matrix = conv3d_matrix(lambda d: None)
    assert rules.check(matrix) == []
    (warning,) = [w for w in rules.warnings(matrix) if w.rule == "known-bad"]
    assert warning.key == "images[0].torch"
    assert warning.message.startswith("torch 2.9.1 with cudnn 9.10.2.21 and qwen-vl is known bad: Qwen-VL's vision "
                                      "patch embedding is a Conv3d")
    assert "(pytorch/pytorch#166122, pytorch/pytorch#174051); allowed: torch outside >=2.9,<2.10 or cudnn outside " \
           "<9.15" in warning.message


@pytest.mark.parametrize("edit, warned", [
    (lambda d: d["images"][0].update(cuda="13.0", python="3.12"), True),  # its CUDA 13.0 build: cuDNN 9.13.0.50
    (lambda d: d["torch"]["2.9.1"]["builds"]["12.8"].update(cudnn="9.15.0.1"), False),
    (lambda d: d["images"][0].update(torch="2.8.0"), False),
])
def test_the_conv3d_entry_needs_both_torch_2_9_and_cudnn_below_9_15(edit, warned):
    matrix = conv3d_matrix(edit)
    assert [w.rule for w in rules.warnings(matrix) if w.rule == "known-bad"] == (["known-bad"] if warned else [])


def test_a_known_bad_entry_that_names_no_component_is_refused():
    problems = problems_of(edited(lambda d: d["known_bad"].append({"with": "deepspeed", "reason": "?"})))
    assert [p.rule for p in problems] == ["version-range"] and "names no component" in problems[0].message
