"""Driver truth: the NVIDIA_REQUIRE_CUDA each image is rendered with, read as the NVIDIA container toolkit reads it
(imagegen/core/nvidia_require.py), against matrix.yaml's driver facts (imagegen/matrix/drivers.py); the labels and
`imagegen validate` that say the same; `imagegen matrix --driver`."""

from __future__ import annotations

import functools
import shutil

import pytest

from imagegen.core.nvidia_require import admits
from imagegen.matrix import drivers
from imagegen.render.contexts import required_cuda
from imagegen.render.locked import driver_problems
from imagegen.render.tags import said_driver
from imagegen.workspace import Workspace

from tests.helpers import MATRIX_PATH, REPO, edited, locked_matrix, parsed, rules_broken
from tests.test_cli import imagegen, on


@functools.lru_cache(maxsize=1)
def real():
    return Workspace(MATRIX_PATH).load()


def rendered(name: str) -> str:
    """The NVIDIA_REQUIRE_CUDA the real matrix's image is rendered with (its base layer's ENV)."""
    image = next(image for image in real().locked.values() if image.name == name)
    return required_cuda(image.contexts[0].dockerfile)


def starts(name: str, driver: str, brand: str) -> bool:
    return admits([rendered(name)], driver, brand, real().matrix.drivers.branches)


def test_the_cuda_12_8_wheels_line_starts_on_r535_datacenter_drivers_and_every_gpu_from_525_60_13():
    assert rendered("debian12-cu128-torch2.8") == "cuda>=12.8 driver>=525.60.13"
    for brand in ("tesla", "geforce"):  # minor-version compatibility: no GPU kind is left out
        assert starts("debian12-cu128-torch2.8", "535.288.01", brand)
        assert starts("debian12-cu128-torch2.8", "550.54.15", brand)
        assert not starts("debian12-cu128-torch2.8", "470.256.02", brand)  # a CUDA 11 driver, and no cuda-compat


def test_the_cuda_13_lines_start_on_r580():
    for name in ("debian12-cu130-torch2.14", "debian12-cu132-torch2.15", "cu130-torch2.14"):
        assert starts(name, "580.95.05", "tesla") and starts(name, "580.95.05", "geforce"), name
        assert not starts(name, "575.57.08", "geforce"), name
    assert rendered("debian12-cu132-torch2.15") == "cuda>=13.2 driver>=580"
    # nvidia/cuda's 13.2 base carries cuda-compat, which the toolkit puts before an R580 driver's libcuda: datacenter
    # GPUs only, as nvidia/cuda's own variable says.
    assert starts("cu132-torch2.15", "580.95.05", "tesla") and not starts("cu132-torch2.15", "580.95.05", "geforce")


def test_an_nvidia_cuda_line_writes_nvidias_own_variable():
    variable = rendered("cu128-torch2.8")
    # nvidia/cuda:12.8.1's, branch by branch and brand by brand (gitlab.com/nvidia/container-images/cuda,
    # dist/12.8.1/ubuntu2404/base/Dockerfile)
    assert variable.startswith("cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 "
                               "brand=tesla,driver>=470,driver<471 ")
    assert variable.endswith(" brand=vws,driver>=565,driver<566 brand=cloudgaming,driver>=565,driver<566")
    assert len(variable.split()) == 1 + 5 * 12
    assert starts("cu128-torch2.8", "535.288.01", "tesla") and not starts("cu128-torch2.8", "535.288.01", "geforce")
    assert not starts("cu128-torch2.8", "545.29.06", "tesla")  # no cuda-compat for R545


def test_every_real_image_says_what_its_facts_admit():
    """Its rendered NVIDIA_REQUIRE_CUDA, its labels and expected.json come from one requirement: validate's check
    finds nothing, and the labels name the oldest driver for any GPU and the datacenter branches."""
    plan = real()
    assert [problem for image in plan.locked.values() for problem in driver_problems(plan.matrix, image)] == []
    labels = next(image for image in plan.locked.values() if image.name == "cu128-torch2.8").labels
    assert said_driver(labels) == ("570", ("470", "535", "550", "560", "565"))
    wheels = next(image for image in plan.locked.values() if image.name == "debian12-cu128-torch2.8")
    assert said_driver(wheels.labels) == ("525.60.13", ())
    assert wheels.expected().model_dump()["driver"] == {"format": 1, "cuda": "12.8", "min_driver": "525.60.13",
                                           "datacenter_branches": [], "compat_package": False}


def test_labels_that_disagree_with_the_variable_are_named():
    req = next(p for p in real().images if p.name == "cu128-torch2.8").gpu.driver
    branches = real().matrix.drivers.branches
    assert drivers.disagreements(req, branches, req.variable, "570", req.forward) == []
    found = drivers.disagreements(req, branches, req.variable, "525.60.13", req.forward)  # the label of before
    assert found == ["its min-driver label says 525.60.13, which is not the oldest driver its NVIDIA_REQUIRE_CUDA "
                     "admits on any GPU"]
    found = drivers.disagreements(req, branches, req.variable, "570", ("535", "550"))
    assert found == ["its datacenter-branches label says 535 550, but its NVIDIA_REQUIRE_CUDA admits 470 535 550 560 "
                     "565 on datacenter GPUs alone"]
    found = drivers.disagreements(req, branches, "cuda>=12.8", "570", req.forward)  # the variable of before
    assert found == ["its NVIDIA_REQUIRE_CUDA refuses driver 470 on tesla GPUs, which the facts admit (forward "
                     "compatibility)"]


def test_validate_refuses_a_line_whose_rendered_variable_refuses_what_its_facts_admit(tmp_path):
    """A planted template writing the variable of before (`cuda>=X.Y` alone): validate names the line's driver
    facts, with file, line and key."""
    path = locked_matrix(tmp_path / "m")
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "templates", templates)
    base = templates / "base.Dockerfile.j2"
    base.write_text(base.read_text().replace('ENV NVIDIA_REQUIRE_CUDA="{{ image.gpu.driver.variable }}"',
                                             'ENV NVIDIA_REQUIRE_CUDA="cuda>={{ image.gpu.cuda_minor }}"'))
    assert imagegen("validate", *on(path)).returncode == 0
    result = imagegen("validate", *on(path), "--templates", str(templates))
    assert result.returncode == 2, result.stderr
    line = next(line for line in result.stderr.splitlines() if "cuda.12.8.driver" in line)
    assert line.startswith(f"error: {path}:") and line.endswith(
        ": cuda.12.8.driver: image cu128-torch2.8: its NVIDIA_REQUIRE_CUDA refuses driver 470 on tesla GPUs, which "
        "the facts admit (forward compatibility) [driver-requirement]")


@pytest.mark.parametrize("edit, rule", [
    (lambda d: d["cuda"]["13.0"]["driver"].update(shipped="575.57.08"), "driver-shipped"),  # a CUDA 12.9 driver
    (lambda d: d["cuda"]["12.8"]["driver"].update(minimum="450.80.02"), "driver-minimum"),  # CUDA 11's minimum
    (lambda d: d["cuda"]["13.0"]["driver"].update(forward=["580"]), "driver-forward"),  # R580 runs 13.0 itself
    (lambda d: d["cuda"]["12.8"]["driver"].update(forward=["600"]), "driver-branch"),  # no such branch listed
    (lambda d: d["drivers"]["branches"].update({"545": "12.1"}), "driver-branch"),  # going backwards
    (lambda d: [d["drivers"]["branches"].pop(b) for b in ("580", "590", "595")], "driver-branch"),  # none runs 13
    (lambda d: d["drivers"]["branches"].update({570: "12.8"}), "driver-branch"),  # unquoted: read as a number
    (lambda d: d["cuda"]["12.8"]["driver"].pop("forward"), "required-key"),
    (lambda d: d["cuda"]["13.0"]["driver"].update(minimum=580), "type"),  # unquoted: YAML's number, not a version
    (lambda d: d["cuda"]["12.8"]["driver"].update(minimum="525.60.x"), "type"),  # the toolkit compares numbers
])
def test_driver_facts_that_cannot_be_true_are_refused(edit, rule):
    assert rule in rules_broken(edited(edit))


def test_the_requirement_follows_where_the_cuda_comes_from():
    matrix = parsed(edited(lambda data: None))
    base = drivers.requirement(matrix, "12.8", compat=True)
    wheels = drivers.requirement(matrix, "12.8", compat=False)
    assert (base.min_driver, base.forward, base.compat_package) == ("570", ("470", "535", "550", "560", "565"), True)
    assert (wheels.min_driver, wheels.forward, wheels.compat_package) == ("525.60.13", (), False)
    assert base.how("535.54.03", "tesla", matrix.drivers.branches) == drivers.FORWARD
    assert wheels.how("535.54.03", "geforce", matrix.drivers.branches) == drivers.MINOR
    assert wheels.how("570.86.10", "geforce", matrix.drivers.branches) == drivers.NATIVE


def table(driver: str) -> dict[str, list[str]]:
    result = imagegen("matrix", "--driver", driver)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"NVIDIA driver {driver} (R{driver.split('.')[0]}, CUDA ")
    return {line.split()[0]: [cell.strip() for cell in line.split("  ") if cell.strip()][2:]
            for line in lines[2:] if line and not line.startswith(("-", " "))}


def test_matrix_driver_answers_for_r535_r550_and_r580():
    r535, r550, r580 = table("535.288.01"), table("550.54.15"), table("580.95.05")
    assert r535["cu128-torch2.8"] == ["yes: forward compatibility (its cuda-compat)", "no: needs 570+"]
    assert r535["debian12-cu128-torch2.8"] == ["yes: minor-version compatibility"] * 2
    assert r535["debian12-cu132-torch2.15"] == ["no: needs 580+"] * 2  # no cuda-compat on wheels
    assert r535["cu132-torch2.15"][0] == "yes: forward compatibility (its cuda-compat)"
    assert r550["cu124-torch2.6"] == ["yes", "yes"]
    assert r550["cu132-torch2.15"] == ["no: needs 595+ or R535, R570, R580, R590", "no: needs 595+"]
    assert r550["cpu"] == ["no: needs 580+ *"] * 2  # it starts, on the CPU: it sets no NVIDIA_REQUIRE_CUDA
    assert r580["debian12-cu132-torch2.15"] == ["yes: minor-version compatibility"] * 2
    assert r580["cu132-torch2.15"] == ["yes: forward compatibility (its cuda-compat)", "no: needs 595+"]
    assert r580["cu128-torch2.8"] == ["yes", "yes"] and r580["cpu"] == ["yes *", "yes *"]
    said = " ".join(line.strip() for line in imagegen("matrix", "--driver", "550.54.15").stdout.splitlines())
    assert "nvidia/cuda bases carry it; images on NVIDIA's wheels (debian12-cu*) or torch's do not." in said


# issue 53, item 18: Arabic-Indic digits were read as 550.54; 5,000 digits were a traceback (past int()'s limit)
@pytest.mark.parametrize("value", ["abc", "5", "550.x", "", "\u0665\u0665\u0660.\u0665\u0664", "5" * 5000])
def test_matrix_driver_refuses_what_is_not_a_driver_version_in_one_line(value):
    result = imagegen("matrix", "--driver", value, real_process=value in ("abc", "5" * 5000))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    shown = value if len(value) <= 40 else f"{value[:20]}... ({len(value)} characters)"
    assert result.stderr.strip().splitlines()[-1] == (f"error: --driver {shown}: not an NVIDIA driver version such as "
                                                      "550.54.15 (nvidia-smi's \"Driver Version\")")
