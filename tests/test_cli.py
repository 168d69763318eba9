"""The imagegen command as a user runs it: exit codes, one-line errors, no tracebacks."""

import json
import subprocess
import sys

from tests.helpers import MATRIX_PATH, REPO, locked_matrix, real_matrix_data


def imagegen(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "imagegen", *args], capture_output=True, text=True, cwd=cwd)


def test_validate_names_each_image_without_a_lock_and_the_command_that_makes_it():
    """Images whose torch only the PyTorch index serves cannot be locked where that index is out of reach."""
    result = imagegen("validate")
    unlocked = [image["name"] for image in real_matrix_data()["images"]
                if not (REPO / "locks" / f"{image['name']}.json").is_file()]
    errors = result.stderr.splitlines()
    assert result.returncode == (2 if unlocked else 0), result.stderr
    assert len(errors) == len(unlocked) and "Traceback" not in result.stderr
    for name, line in zip(unlocked, errors):
        assert f"no lock at locks/{name}.json; run `imagegen lock --image {name}` [lock-missing]" in line


def test_validate_accepts_the_real_matrix_where_every_image_is_locked(tmp_path):
    result = imagegen("validate", "--matrix", str(locked_matrix(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "images valid, each locked" in result.stdout


def test_validate_reports_a_bad_matrix_with_exit_2_and_no_traceback(tmp_path):
    bad = tmp_path / "matrix.yaml"
    bad.write_text(MATRIX_PATH.read_text().replace('    torch: 2.6.0\n    flash_attn: 2.7.4.post1',
                                                   '    torch: 2.6.0\n    flash_attn: 2.6.3', 1))
    result = imagegen("validate", "--matrix", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if "flash_attn: 2.6.3" in text)
    assert result.stderr.startswith(f"error: {bad}:{line}: images[2].flash_attn: flash-attn 2.6.3 has no "
                                    "prebuilt wheel for torch 2.6")
    assert "[flash-attn-wheel]" in result.stderr


def test_missing_matrix_file_is_one_clear_line(tmp_path):
    result = imagegen("validate", "--matrix", str(tmp_path / "nope.yaml"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "cannot read the matrix file" in result.stderr


def test_render_unknown_cuda_lists_the_cuda_versions(tmp_path):
    result = imagegen("render", "--cuda", "9.9", "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert result.stderr == ("error: no image matches --cuda 9.9; CUDA versions: "
                             "11.8, 12.1, 12.4, 12.6, 12.8, 13.0\n")
    assert not (tmp_path / "out").exists()


def test_render_cuda_12_4_writes_the_layer_chain(tmp_path):
    out = tmp_path / "out"
    result = imagegen("render", "--cuda", "12.4", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "cu124-torch2.6").iterdir()) == ["base", "framework", "image.json",
                                                                          "trainer"]
    assert "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04" in (out / "cu124-torch2.6/base/Dockerfile").read_text()
    assert (out / "cu124-torch2.6/trainer/trainer/pyproject.toml").is_file()
    assert not list((out / "cu124-torch2.6/trainer/trainer").glob("tests"))


def test_matrix_github_format_is_a_strategy_include_list():
    result = imagegen("matrix", "--format", "github", "--cuda", "12")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert {entry["image"] for entry in include} >= {"cu124-torch2.6", "cu128-torch2.8"}
    assert all(entry["gpu"] for entry in include)


def test_matrix_table_and_json():
    table = imagegen("matrix", "--image", "cpu")
    assert table.stdout.splitlines()[1].startswith("cpu ")
    specs = json.loads(imagegen("matrix", "--format", "json", "--torch", "2.8").stdout)
    assert [s["name"] for s in specs] == ["cu128-torch2.8"]
