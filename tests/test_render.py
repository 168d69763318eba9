"""Rendered build contexts: snapshots, determinism, atomic output, layer sharing, hadolint."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from imagegen import render
from imagegen.errors import UserError

from tests.helpers import REPO, spec_named, specs

SNAPSHOTS = Path(__file__).parent / "snapshots"
TRAINER = {"pyproject.toml": b"[project]\nname = 'vlmgrpo'\nversion = '0.1.0'\n",
           "src/vlmgrpo/__init__.py": b""}


def contexts_for(spec_list, trainer=TRAINER, options=render.RenderOptions(), templates=REPO / "templates"):
    env = render.environment(templates)
    return [c for spec in spec_list for c in render.render_image(spec, env, trainer, options)]


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("context", contexts_for(specs()), ids=lambda c: f"{c.image}/{c.layer}")
def test_rendered_dockerfile_matches_snapshot(context):
    """Set UPDATE_SNAPSHOTS=1 to accept a deliberate template change, then read the diff."""
    snapshot = SNAPSHOTS / context.image / f"{context.layer}.Dockerfile"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(context.dockerfile)
    assert context.dockerfile == snapshot.read_text()


def test_cu124_renders_from_its_nvidia_base_with_torch_from_the_cu124_index():
    base, framework, trainer = contexts_for([spec_named("cu124-torch2.6")])
    assert base.dockerfile.splitlines()[3] == "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04"
    assert "pip install torch==2.6.0 torchvision==0.21.0 --index-url https://download.pytorch.org/whl/cu124" \
        in framework.dockerfile
    assert f"FROM {base.ref}" in framework.dockerfile and f"FROM {framework.ref}" in trainer.dockerfile


def test_two_renders_are_byte_identical(tmp_path):
    chosen = [spec_named("cpu"), spec_named("cu128-torch2.8")]
    render.write(tmp_path / "a", contexts_for(chosen), chosen)
    render.write(tmp_path / "b", contexts_for(chosen), chosen)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert (tmp_path / "a" / "cpu" / "framework" / "wheelhouse").is_dir()


def test_a_render_replaces_the_previous_one_whole(tmp_path):
    out = tmp_path / "out"
    render.write(out, contexts_for([spec_named("cpu")]), [spec_named("cpu")])
    render.write(out, contexts_for([spec_named("cu124-torch2.6")]), [spec_named("cu124-torch2.6")])
    assert sorted(p.name for p in out.iterdir()) == [".imagegen-render", "cu124-torch2.6"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_failed_render_leaves_nothing_behind(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "templates", templates)
    (templates / "trainer.Dockerfile.j2").write_text("FROM {{ parent }}\nRUN {{ no_such_variable }}\n")
    with pytest.raises(UserError, match="trainer.Dockerfile.j2.*no_such_variable"):
        contexts_for([spec_named("cpu")], templates=templates)
    out = tmp_path / "out"
    with pytest.raises(UserError, match="not an imagegen render"):
        (out / "precious").mkdir(parents=True)
        render.write(out, contexts_for([spec_named("cpu")]), [spec_named("cpu")])
    assert [p.name for p in out.iterdir()] == ["precious"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "templates"]


def test_images_on_one_cuda_base_share_the_base_layer():
    first = contexts_for([spec_named("cu128-torch2.7")])
    second = contexts_for([spec_named("cu128-torch2.8")])
    assert first[0].ref == second[0].ref
    assert first[1].ref != second[1].ref


def test_a_trainer_change_leaves_the_framework_layer_alone():
    before = contexts_for([spec_named("cpu")])
    after = contexts_for([spec_named("cpu")], trainer={**TRAINER, "src/vlmgrpo/new.py": b"x = 1\n"})
    assert [c.ref for c in before[:2]] == [c.ref for c in after[:2]]
    assert before[2].ref != after[2].ref


def test_base_image_and_apt_mirror_overrides():
    options = render.RenderOptions(base_image="local/debian:bookworm", apt_mirror="http://mirror.example/debian")
    base = contexts_for([spec_named("cpu")], options=options)[0]
    assert "FROM local/debian:bookworm" in base.dockerfile
    assert "#http://mirror.example/debian#g" in base.dockerfile


def test_trainer_files_leave_out_tests_and_caches(tmp_path):
    (tmp_path / "src/pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "src/pkg/a.py").write_text("")
    (tmp_path / "src/pkg/__pycache__/a.cpython-311.pyc").write_text("")
    (tmp_path / "tests/test_a.py").write_text("")
    assert sorted(render.trainer_files(tmp_path)) == ["pyproject.toml", "src/pkg/a.py"]


def test_every_rendered_dockerfile_passes_hadolint_at_warning_level(tmp_path):
    hadolint = shutil.which("hadolint") or str(Path(os.sys.executable).parent / "hadolint")
    every = specs()
    render.write(tmp_path / "out", contexts_for(every), every)
    dockerfiles = sorted((tmp_path / "out").glob("*/*/Dockerfile"))
    assert len(dockerfiles) == 3 * len(every)
    result = subprocess.run([hadolint, "--failure-threshold", "warning", *map(str, dockerfiles)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
