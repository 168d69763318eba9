"""Rendered build contexts: snapshots, determinism, atomic output, layer sharing, hadolint."""

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from imagegen.core.errors import UserError
from imagegen.locking.lockfile import BasePin
from imagegen.render import contexts as render
from imagegen.render import output
from imagegen.render.locked import LockedImage
from imagegen.workspace import Workspace

from tests.helpers import REPO, locked_images, locked_named

SNAPSHOTS = Path(__file__).parent / "snapshots"
TRAINER = {"trainer/pyproject.toml": b"[project]\nname = 'vlmgrpo'\nversion = '0.1.0'\n",
           "trainer/src/vlmgrpo/__init__.py": b"", "contract/pyproject.toml": b"[project]\nname = 'imagegen-contract'\n"}


def contexts_for(images, trainer=TRAINER, options=render.RenderOptions(), templates=REPO / "templates"):
    env = render.environment(templates)
    return [c for image in images
            for c in render.render_image(image.plan, image.lock, dict(image.versions), env, trainer, options)]


def with_contexts(images: list[LockedImage], **kwargs) -> list[LockedImage]:
    """The images with contexts rendered from the test's own trainer files."""
    return [replace(image, contexts=tuple(contexts_for([image], **kwargs))) for image in images]


def real_locked_images() -> list[LockedImage]:
    """The real matrix's locked images: hadolint reads them all (tests/test_real_images.py checks their invariants)."""
    return list(Workspace().load().locked.values())


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def matches_snapshot(name: str, rendered: str) -> None:
    """`rendered` is tests/snapshots/NAME as recorded; UPDATE_SNAPSHOTS=1 records it instead."""
    snapshot = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(rendered)
    if not snapshot.is_file():
        pytest.fail(f"no snapshot {snapshot.relative_to(SNAPSHOTS.parent.parent)}: make it with UPDATE_SNAPSHOTS=1 "
                    ".venv/bin/python -m pytest tests/test_render.py -k snapshot, then read it")
    assert rendered == snapshot.read_text()


# The snapshots render the tests' fixture matrix (tests/fixture, with its locks), not the real one: a template change
# shows in them, a change to matrix.yaml or its locks does not (the real matrix is checked by invariants).
@pytest.mark.parametrize("context", contexts_for(locked_images()), ids=lambda c: f"{c.image}/{c.layer}")
def test_rendered_dockerfile_matches_snapshot(context):
    """The fixture's images as rendered. Set UPDATE_SNAPSHOTS=1 to accept a deliberate template change, then read
    the diff."""
    matches_snapshot(f"{context.image}/{context.layer}.Dockerfile", context.dockerfile)


@pytest.mark.parametrize("image", locked_images(), ids=lambda image: image.key)
def test_rendered_expected_json_matches_snapshot(image):
    """What the image is checked against inside (expected.json), as rendered for the fixture's images."""
    framework = next(c for c in contexts_for([image]) if c.layer == "framework")
    matches_snapshot(f"{image.key}/expected.json", framework.files["expected.json"].decode())


def test_cu124_renders_from_its_nvidia_base_and_installs_torch_from_its_lock():
    image = locked_named("cu124-torch2.6")
    base, framework, trainer = contexts_for([image])
    assert base.dockerfile.splitlines()[3] == f"FROM {image.lock.base.pinned_ref}"
    assert "uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/torch.txt" \
        in framework.dockerfile
    assert framework.files["requirements/installer.txt"].decode().startswith("uv==")
    assert "\n    pip install --no-deps --require-hashes -r /tmp/requirements/installer.txt" in framework.dockerfile
    torch_step = framework.files["requirements/torch.txt"].decode()
    assert torch_step.startswith("filelock==") or "torch==2.6.0 --hash=sha256:" in torch_step
    assert all("--hash=sha256:" in line for line in torch_step.splitlines())
    assert f"FROM {base.ref}" in framework.dockerfile and f"FROM {framework.ref}" in trainer.dockerfile


def test_every_locked_package_is_installed_by_exactly_one_step():
    image = locked_named("cu130-torch2.11")
    framework = contexts_for([image])[1]
    step_files = [path for path in framework.files if path.startswith("requirements/")]
    installed = [line.split("==")[0] for path in step_files for line in framework.files[path].decode().splitlines()
                 if "==" in line and not line.startswith("flash-attn")]
    assert sorted(installed) == sorted(p.name for p in image.lock.packages)
    order = [path for path in step_files]
    assert order.index("requirements/torch.txt") < order.index("requirements/deepspeed-sources.txt")
    assert "flash-attn==2.8.3 --hash=sha256:" in framework.files["requirements/flash-attn-sources.txt"].decode()


def test_a_pinned_base_digest_goes_into_from(tmp_path):
    image = locked_named("cpu")
    pinned = replace(image, lock=replace(image.lock, base=BasePin("debian:bookworm-slim", "sha256:" + "a" * 64)))
    assert contexts_for([pinned])[0].dockerfile.splitlines()[3] == f"FROM debian:bookworm-slim@sha256:{'a' * 64}"


def test_two_renders_are_byte_identical(tmp_path):
    chosen = with_contexts([locked_named("cpu"), locked_named("cu128-torch2.8")])
    output.write(tmp_path / "a", chosen)
    output.write(tmp_path / "b", chosen)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert (tmp_path / "a" / "cpu" / "framework" / "wheelhouse").is_dir()


def test_a_render_replaces_the_previous_one_whole(tmp_path):
    out = tmp_path / "out"
    output.write(out, [locked_named("cpu")])
    output.write(out, [locked_named("cu124-torch2.6")])
    assert sorted(p.name for p in out.iterdir()) == [".imagegen-render", "cu124-torch2.6"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_render_into_a_link_replaces_what_it_points_to_again_and_again(tmp_path):
    """issue 53, item 17: `--out LINK` (a link to an earlier render) left .LINK.previous behind, and every later
    render there failed with a traceback."""
    target, link = tmp_path / "renders" / "today", tmp_path / "out"
    output.write(target, [locked_named("cpu")])
    link.symlink_to(target)
    for image in ("cu124-torch2.6", "cpu", "cu124-torch2.6"):
        output.write(link, [locked_named(image)])
        assert link.is_symlink() and sorted(p.name for p in link.iterdir()) == [".imagegen-render", image]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "renders"]
    assert [p.name for p in target.parent.iterdir()] == ["today"]


def test_a_failed_render_leaves_nothing_behind(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "templates", templates)
    (templates / "trainer.Dockerfile.j2").write_text("FROM {{ parent }}\nRUN {{ no_such_variable }}\n")
    with pytest.raises(UserError, match="trainer.Dockerfile.j2.*no_such_variable"):
        contexts_for([locked_named("cpu")], templates=templates)
    out = tmp_path / "out"
    with pytest.raises(UserError, match="not an imagegen render"):
        (out / "precious").mkdir(parents=True)
        output.write(out, [locked_named("cpu")])
    assert [p.name for p in out.iterdir()] == ["precious"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "templates"]
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(UserError, match="exists and is a file, not a folder"):
        output.write(notes, [locked_named("cpu")])
    assert notes.read_text() == "mine"


def test_images_on_one_cuda_base_share_the_base_layer():
    image = locked_named("cu128-torch2.8")
    other_lock = replace(image.lock, packages=tuple(replace(p, version="0.0.1") if p.name == "peft" else p
                                                    for p in image.lock.packages))
    first = contexts_for([image])
    second = contexts_for([replace(image, plan=replace(image.plan, name="cu128-other"), lock=other_lock)])
    assert first[0].ref == second[0].ref
    assert first[1].ref != second[1].ref


def test_a_trainer_change_leaves_the_framework_layer_alone():
    before = contexts_for([locked_named("cpu")])
    after = contexts_for([locked_named("cpu")], trainer={**TRAINER, "src/vlmgrpo/new.py": b"x = 1\n"})
    assert [c.ref for c in before[:2]] == [c.ref for c in after[:2]]
    assert before[2].ref != after[2].ref


def test_base_image_and_apt_mirror_overrides():
    options = render.RenderOptions(base_images=(("", "local/debian:bookworm"),),
                                   apt_mirror="http://mirror.example/debian")
    base = contexts_for([locked_named("cpu")], options=options)[0]
    assert "FROM local/debian:bookworm" in base.dockerfile
    assert "#http://mirror.example/debian#g" in base.dockerfile


def test_source_files_leave_out_tests_and_caches(tmp_path):
    (tmp_path / "src/pkg/__pycache__").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "src/pkg/a.py").write_text("")
    (tmp_path / "src/pkg/__pycache__/a.cpython-311.pyc").write_text("")
    (tmp_path / "tests/test_a.py").write_text("")
    assert sorted(render.source_files(tmp_path)) == ["pyproject.toml", "src/pkg/a.py"]


def test_the_trainer_layer_installs_the_contract_beside_the_trainer(tmp_path):
    """The contract is the trainer's one dependency no index holds: its source travels in the trainer layer's context,
    and a workspace without it is one line."""
    sources = render.trainer_sources(REPO / "trainer", REPO / "contract")
    assert "contract/src/imagegen_contract/inventory.py" in sources and "trainer/src/vlmgrpo/__init__.py" in sources
    (trainer_layer,) = [c for c in contexts_for([locked_named("cpu")], trainer=sources) if c.layer == "trainer"]
    assert "pip install --no-cache-dir --no-deps --no-build-isolation /src/contract /src/trainer" in trainer_layer.dockerfile
    with pytest.raises(UserError, match=f"{tmp_path}: no contract distribution here"):
        render.trainer_sources(REPO / "trainer", tmp_path)


def test_every_rendered_dockerfile_passes_hadolint_at_warning_level(tmp_path):
    hadolint = shutil.which("hadolint") or str(Path(os.sys.executable).parent / "hadolint")
    every = real_locked_images()
    output.write(tmp_path / "out", every)
    dockerfiles = sorted((tmp_path / "out").glob("*/*/Dockerfile"))
    assert len(dockerfiles) == 3 * len(every)
    result = subprocess.run([hadolint, "--failure-threshold", "warning", *map(str, dockerfiles)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_where_the_matrix_lives_changes_no_rendered_file(tmp_path):
    """The inputs digest, and so the version tag, covers every rendered file: none may name the matrix's path."""
    from tests.helpers import FIXTURE_TRAINER, locked_matrix

    elsewhere = Workspace(locked_matrix(tmp_path), trainer=FIXTURE_TRAINER).load().locked
    for image in locked_images():
        assert image.lock.command != elsewhere[image.key].lock.command  # `imagegen lock --matrix TMP ...`
        assert elsewhere[image.key].version_tag == image.version_tag


def test_a_templates_folder_without_the_entrypoint_is_one_line(tmp_path):
    templates = tmp_path / "templates"
    shutil.copytree(REPO / "templates", templates)
    (templates / "entrypoint.sh").unlink()
    with pytest.raises(UserError, match=r"entrypoint.sh: No such file or directory; the templates folder needs it"):
        contexts_for([locked_named("cpu")], templates=templates)
