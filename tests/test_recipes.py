"""The recipes of docs/architecture.md, each run step by step as a contributor would, on a copy of the tests'
matrix: add a CUDA version, a component, a reward function, an in-image check."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from imagegen.workspace import Workspace

from tests.helpers import FIXTURE_TRAINER, REPO, check_runner, locked_matrix
from tests.test_cli import imagegen, on
from tests.test_components import add_liger
from tests.test_real_images import holds_every_invariant

RECIPES = (REPO / "docs" / "architecture.md").read_text()


def without_cuda_12_6(data):
    del data["cuda"]["12.6"]
    data["images"] = [image for image in data["images"] if image.get("cuda") != "12.6"]


@pytest.mark.network
def test_recipe_add_a_cuda_version(tmp_path):
    assert "### Add a CUDA version" in RECIPES
    path = locked_matrix(tmp_path, without_cuda_12_6)
    (tmp_path / "locks" / "cu126-torch2.7.json").unlink(missing_ok=True)
    data = yaml.safe_load(path.read_text())
    # 1-2: the facts, from NVIDIA's release notes, and an image naming them
    data["cuda"]["12.6"] = {"version": "12.6.3", "os": "ubuntu24.04", "cudnn": 9,
                            "base": {"devel": "nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04",
                                     "runtime": "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04"},
                            "driver": {"shipped": "560.35.05", "minimum": "525.60.13", "forward": ["470", "535", "550"],
                                       "source": "https://docs.nvidia.com/cuda/archive/12.6.3/",
                                       "forward_source": "https://gitlab.com/nvidia/container-images/cuda/-/blob/"
                                                         "master/dist/12.6.3/ubuntu2404/base/Dockerfile"},
                            "archs": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]}
    data["images"].insert(0, {"name": "cu126-torch2.7", "cuda": "12.6", "python": "3.12", "torch": "2.7.1",
                              "flash_attn": "2.8.0.post2"})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    # 3: validate says what is missing
    missing = imagegen("validate", *on(path))
    assert missing.returncode == 2 and "cu126-torch2.7.json; run `imagegen lock" in missing.stderr
    # 4: lock it
    locked = imagegen("lock", *on(path), "--image", "cu126-torch2.7")
    assert locked.returncode == 0, locked.stderr
    # 5: validate passes; matrix shows it; render writes its Dockerfiles
    assert imagegen("validate", *on(path)).returncode == 0
    listed = imagegen("matrix", *on(path), "--image", "cu126-torch2.7").stdout.splitlines()[1]
    assert listed.startswith("cu126-torch2.7 ") and "0.1.0-torch2.7.1-cu126-cudnn9-py3.12-" in listed
    rendered = imagegen("render", *on(path), "--image", "cu126-torch2.7", "--out", str(tmp_path / "out"))
    assert rendered.returncode == 0, rendered.stderr
    base = (tmp_path / "out" / "cu126-torch2.7" / "base" / "Dockerfile").read_text()
    assert "FROM nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04" in base
    # 6: it holds what every locked image of the real matrix is checked for
    added = [i for i in Workspace(path, trainer=FIXTURE_TRAINER).load().locked.values() if i.name == "cu126-torch2.7"]
    assert added
    for image in added:
        holds_every_invariant(image, yaml.safe_load(path.read_text()))


@pytest.mark.network
def test_recipe_add_a_component(tmp_path):
    assert "### Add a component" in RECIPES
    def row_and_version(data):  # 1, and 2's version: what the recipe has one write by hand
        add_liger(data)
        del data["packages"]["liger-kernel"]
    path = locked_matrix(tmp_path, row_and_version)
    told = imagegen("validate", *on(path))
    assert told.returncode == 2 and "`imagegen facts update liger-kernel==0.8.5`" in told.stderr + told.stdout
    assert imagegen("facts", "update", "liger-kernel==0.8.5", *on(path)).returncode == 0  # 2's facts, from PyPI
    assert imagegen("validate", *on(path)).returncode == 2  # the cpu lock is stale until the re-lock
    locked = imagegen("lock", *on(path), "--image", "cpu")  # 3
    assert locked.returncode == 0, locked.stderr
    assert imagegen("validate", *on(path)).returncode == 0
    for section in json.loads((tmp_path / "locks" / "cpu.json").read_text())["platforms"].values():
        assert {p["name"]: p["version"] for p in section["packages"]}["liger-kernel"] == "0.8.5"
    listed = json.loads(imagegen("matrix", *on(path), "--image", "cpu", "--format", "json").stdout)
    assert {image["labels"]["io.imagegen.liger_kernel"] for image in listed} == {"0.8.5"}
    # Every other image keeps its tag and labels: nothing to publish again but the cpu image.
    before = locked_matrix(tmp_path / "before", lambda data: None)

    def others(matrix_path):
        return {(row["name"], row["platform"]): (row["version_tag"], row["labels"]) for row in json.loads(imagegen(
            "matrix", *on(matrix_path), "--all", "--format", "json").stdout) if row["name"] != "cpu"}
    assert others(path) == others(before) and len(others(path)) > 3


REWARD = '''\
def answer_length(prompts, completions, **kwargs):
    """1.0 for an answer of at most 80 characters: short answers."""
    return [1.0 if len(str(completion)) <= 80 else 0.0 for completion in completions]
'''


@pytest.mark.slow
def test_recipe_add_a_reward_function(tmp_path):
    assert "### Add a reward function" in RECIPES
    vlmgrpo = [sys.executable, "-m", "vlmgrpo"]
    made = subprocess.run([*vlmgrpo, "make-tiny", "--out", str(tmp_path / "tiny"), "--rows", "2"],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr
    tiny = json.loads(made.stdout.splitlines()[-1])
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "answer_length.py").write_text(REWARD)  # 1
    config = tmp_path / "config.yaml"  # 2
    config.write_text(yaml.safe_dump({"model_name_or_path": tiny["model"], "data": [tiny["data"]],
                                      "image_root": tiny["image_root"],
                                      "reward_funcs": ["iou", "format", "rewards/answer_length.py:answer_length"]}))
    rows = [json.loads(line) for line in open(tiny["data"])]
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": row["id"], "completion": text}) + "\n"
                                   for row, text in zip(rows, ["<answer>short</answer>", "x" * 200])))
    scored = subprocess.run([*vlmgrpo, "score", "--config", str(config), "--completions", str(completions)],  # 3
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    lines = [json.loads(line) for line in scored.stdout.splitlines()]
    assert [line["rewards"]["answer_length"] for line in lines] == [1.0, 0.0]  # logged by the function's name


HOST_CHECK = '''\
from imagegen.stages.results import Check

NAMES, PHASE, NEEDS = ("recipe.host_check",), "inside", ()


def run(context):
    return [Check(NAMES[0], "pass", f"checked {context.ref}")]
'''
INSIDE_CHECK = '''\
from vlmgrpo.image.checks import PASS, result

NAMES = ("recipe.inside_check",)
PHASE = "components"
NEEDS = ()


def run(context):
    return [result(NAMES[0], PASS, "ran inside")]
'''


@pytest.mark.slow
def test_recipe_add_an_in_image_check(tmp_path, monkeypatch):
    """Step 1 for each side, as a file of its own in a directory the package's __path__ takes (as a new file in the
    package would be); step 3: the runners report it."""
    assert "### Add an in-image check" in RECIPES
    from types import SimpleNamespace

    from imagegen.stages import checks

    (tmp_path / "host" / "recipe_host_check.py").parent.mkdir()
    (tmp_path / "host" / "recipe_host_check.py").write_text(HOST_CHECK)
    monkeypatch.setattr(checks, "__path__", [*checks.__path__, str(tmp_path / "host")])
    monkeypatch.delitem(sys.modules, "imagegen.stages.checks.recipe_host_check", raising=False)
    try:
        (module,) = [m for m in checks.discovered(check_runner()) if m.NAMES == ("recipe.host_check",)]
        assert [c.detail for c in module.run(SimpleNamespace(ref="an-image"))] == ["checked an-image"]
    finally:
        sys.modules.pop("imagegen.stages.checks.recipe_host_check", None)
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "recipe_inside_check.py").write_text(INSIDE_CHECK)
    program = ("import sys, json; from vlmgrpo.image import checks; checks.__path__.append(sys.argv[1]); "
               "from vlmgrpo.image.selftest import run_selftest; "
               "print(json.dumps(run_selftest(sys.argv[2], skip_train=True)))")
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path / "inside"), str(tmp_path / "absent.json")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = {c["name"]: c for c in json.loads(done.stdout.splitlines()[-1])["checks"]}
    assert report["recipe.inside_check"] == {"name": "recipe.inside_check", "status": "pass", "detail": "ran inside"}
