"""The imagegen command as a user runs it: exit codes, one-line errors, no tracebacks (on the tests' own
matrix, tests/fixture)."""

import contextlib
import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.helpers import FIXTURE_MATRIX, FIXTURE_TRAINER, REPO, fixture_data, locked_matrix

FIXTURE = ("--matrix", str(FIXTURE_MATRIX), "--trainer", str(FIXTURE_TRAINER))


def imagegen(*args, cwd=REPO, real_process=False) -> subprocess.CompletedProcess:
    """The command with these arguments, in `cwd`: in this process through click's test runner (a fresh interpreter
    would spend a second importing imagegen's stages on each run), or in a real process, as a user's shell runs it,
    where what must be seen is that no traceback reaches the terminal."""
    if real_process:
        return subprocess.run([sys.executable, "-m", "imagegen", *args], capture_output=True, text=True, cwd=cwd)
    from imagegen.cli import main

    with contextlib.chdir(cwd):
        result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback a user would see: the test fails with it
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def on(matrix) -> tuple[str, ...]:
    """--matrix MATRIX with the fixture's trainer, whose requirements its locks were made for."""
    return "--matrix", str(matrix), "--trainer", str(FIXTURE_TRAINER)


def test_validate_warns_for_each_image_locked_where_the_pytorch_index_answers():
    """Images whose torch only the PyTorch index serves cannot be locked where that index is out of reach: said,
    with the command and the workflow that lock them, and validate passes."""
    result = imagegen("validate", *FIXTURE)
    unlocked = [image["name"] for image in fixture_data()["images"] if image.get("lock") == "pytorch-index"
                and not (FIXTURE_MATRIX.parent / "locks" / f"{image['name']}.json").is_file()]
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "not locked" in line]
    assert len(warnings) == 1 and len(unlocked) >= 1 and "Traceback" not in result.stderr  # one line per kind
    (line,) = warnings
    if len(unlocked) == 1:
        assert line.startswith(f"warning: {unlocked[0]}: not locked (no lock at ")
    else:
        assert line.startswith(f"warning: {len(unlocked)} images not locked: their torch builds are on the PyTorch "
                               "index alone: ")
    for name in unlocked:
        assert f"{name} (https://download.pytorch.org/whl/cu" in line or f"{name}: not locked" in line
    assert f"run `imagegen lock --matrix {FIXTURE_MATRIX} --image " in line and "where that index answers" in line
    assert "scheduled locks workflow (.github/workflows/locks.yml)" in line
    names = len(fixture_data()["images"])
    assert f"{names} images valid (10 image x platform builds), {names - len(unlocked)} locked" in result.stdout


def test_validate_refuses_an_image_that_could_be_locked_and_is_not(tmp_path):
    path = locked_matrix(tmp_path)
    (tmp_path / "locks" / "cu124-torch2.6.json").unlink()
    result = imagegen("validate", *on(path))
    assert result.returncode == 2
    assert f"no lock at {tmp_path}/locks/cu124-torch2.6.json; run `imagegen lock --matrix {path} --image " \
           f"cu124-torch2.6` [lock-missing]" in result.stderr


def test_validate_accepts_a_matrix_where_every_image_is_locked(tmp_path):
    result = imagegen("validate", *on(locked_matrix(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert "5 images valid (7 image x platform builds), 5 locked" in result.stdout


def test_validate_reports_a_bad_matrix_with_exit_2_and_no_traceback(tmp_path):
    bad = tmp_path / "matrix.yaml"
    bad.write_text(FIXTURE_MATRIX.read_text().replace('    torch: 2.6.0\n    flash_attn: 2.7.4.post1',
                                                      '    torch: 2.6.0\n    flash_attn: 2.6.3', 1))
    result = imagegen("validate", *on(bad), real_process=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if "flash_attn: 2.6.3" in text)
    assert result.stderr.startswith(f"error: {bad}:{line}: images[2].flash_attn: flash-attn 2.6.3 has no "
                                    "prebuilt wheel for torch 2.6")
    assert "[flash-attn-wheel]" in result.stderr


def test_missing_matrix_file_is_one_clear_line(tmp_path):
    result = imagegen("validate", "--matrix", str(tmp_path / "nope.yaml"), real_process=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "cannot read the matrix file" in result.stderr


def test_render_unknown_cuda_lists_the_cuda_versions(tmp_path):
    result = imagegen("render", *FIXTURE, "--cuda", "9.9", "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert result.stderr == ("error: no image matches --cuda 9.9; CUDA versions: "
                             "11.8, 12.1, 12.4, 12.6, 12.8, 13.0\n")
    assert not (tmp_path / "out").exists()


def test_render_cuda_12_4_writes_the_layer_chain(tmp_path):
    out = tmp_path / "out"
    result = imagegen("render", *FIXTURE, "--cuda", "12.4", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (out / "cu124-torch2.6").iterdir()) == ["base", "framework", "image.json",
                                                                          "trainer"]
    assert "FROM nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04" in (out / "cu124-torch2.6/base/Dockerfile").read_text()
    assert (out / "cu124-torch2.6/trainer/trainer/pyproject.toml").is_file()
    assert not list((out / "cu124-torch2.6/trainer/trainer").glob("tests"))


def test_build_refuses_an_image_locked_elsewhere_in_one_line():
    result = imagegen("build", *FIXTURE, "--image", "cu118-torch2.6")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: cu118-torch2.6: not locked (no lock at ") and "PyTorch index alone" in line


def test_matrix_github_format_is_a_strategy_include_list():
    result = imagegen("matrix", *FIXTURE, "--format", "github", "--cuda", "12")
    assert result.returncode == 0, result.stderr
    include = json.loads(result.stdout)["include"]
    assert {entry["image"] for entry in include} >= {"cu124-torch2.6", "cu128-torch2.8"}
    assert all(entry["gpu"] for entry in include)


def test_matrix_table_and_json_say_each_images_state():
    table = imagegen("matrix", *FIXTURE, "--image", "cpu")
    assert table.stdout.splitlines()[1].startswith("cpu ")
    listed = json.loads(imagegen("matrix", *FIXTURE, "--format", "json", "--torch", "2.8").stdout)
    assert [(image["name"], image["state"]) for image in listed] == [("cu128-torch2.8", "locked")]
    unlocked = imagegen("matrix", *FIXTURE, "--image", "cu121-torch2.5").stdout.splitlines()[1]
    assert unlocked.endswith("(needs the PyTorch index)")


def test_build_and_push_offer_one_compression_option():
    def compression_help(command: str) -> str:
        text = imagegen(command, "--help").stdout
        start = text.index("--compression [")
        return " ".join(text[start:text.index("\n  --", start)].split())

    assert compression_help("build") == compression_help("push")
    from imagegen.engine.registry import COMPRESSIONS

    offered = f"[{'|'.join(COMPRESSIONS)}]"
    assert offered in compression_help("build") and "[default: gzip]" in compression_help("build")


def build_run(monkeypatch, *args):
    """The pipeline.Run that `imagegen build ARGS` hands the pipeline (which is not run)."""
    from imagegen.stages import pipeline

    handed = []
    monkeypatch.setattr(pipeline, "build_test_push", lambda run, echo: handed.append(run) or 0)
    result = imagegen("build", *FIXTURE, "--image", "cpu", *args)
    assert result.returncode == 0, result.stderr
    (run,) = handed
    return run


def test_build_push_passes_its_compression_to_the_pipeline(monkeypatch):
    run = build_run(monkeypatch, "--push", "--registry", "127.0.0.1:9", "--compression", "zstd")
    assert (run.registry, run.compression, run.test) == ("127.0.0.1:9", "zstd", True)
    assert build_run(monkeypatch, "--push", "--registry", "127.0.0.1:9").compression == "gzip"


def test_compression_without_a_push_is_one_clear_error():
    for value in ("zstd", "gzip"):  # the default given on purpose is as much a mistake
        result = imagegen("build", *FIXTURE, "--image", "cpu", "--compression", value, real_process=value == "zstd")
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr == (f"error: --compression {value} is of the layers --push sends: add --push --registry "
                                 "HOST[/NAMESPACE], or leave --compression out\n")


def test_push_index_with_a_compression_is_one_clear_error():
    result = imagegen("push", *FIXTURE, "--image", "cpu", "--registry", "127.0.0.1:9", "--index", "--compression",
                      "zstd")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --index pushes no layers") and line.endswith("leave --compression zstd out")


def test_an_unknown_compression_is_refused_by_both_commands():
    for command in ("build", "push"):
        result = imagegen(command, *FIXTURE, "--image", "cpu", "--push" if command == "build" else "--skip-tests",
                          "--registry", "127.0.0.1:9", "--compression", "xz")
        assert result.returncode == 2 and "'xz' is not one of 'gzip', 'zstd'" in result.stderr


def test_an_image_with_an_unhashed_artifact_is_refused_before_any_build_unless_allowed(tmp_path):
    """The fixture's cu128-torch2.8 lock holds its flash-attn wheel without a sha256 (locked where GitHub did not
    answer): validate names it, build refuses it in one line before anything is built, --allow-unhashed lets it by."""
    validate = imagegen("validate", *FIXTURE)
    (line,) = [text for text in validate.stderr.splitlines() if "unhashed artifact" in text]
    assert "cu128-torch2.8 (flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl)" in line
    build = ["build", "--matrix", str(FIXTURE_MATRIX), "--trainer", str(FIXTURE_TRAINER), "--image", "cu128-torch2.8",
             "--context-dir", str(tmp_path / "contexts"),
             "--report", str(tmp_path / "build.json"), "--docker", str(tmp_path / "no-docker")]
    refused = imagegen(*build)
    assert refused.returncode == 1 and not (tmp_path / "contexts").exists()
    (error,) = refused.stderr.strip().splitlines()
    assert ("cu128-torch2.8: its lock installs flash-attn @ https://github.com/Dao-AILab/flash-attention/releases/"
            "download/v2.8.3/") in error
    assert "--allow-unhashed" in error and "imagegen lock --image NAME" in error
    allowed = imagegen(*build, "--allow-unhashed")
    # On to the engine: the client (none here), or where an engine answers, the base it does not hold
    assert "without a sha256" not in allowed.stderr
    assert "no-docker" in allowed.stderr or "its base nvidia/cuda:12.8.1" in allowed.stderr, allowed.stderr


def test_a_report_path_that_holds_something_else_is_refused_before_any_work(tmp_path):
    notes = tmp_path / "matrix.yaml"
    notes.write_text("images: {}\n")
    result = imagegen("push", "--image", "cpu", "--registry", "127.0.0.1:9", "--report", str(notes))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{notes} exists and is not a push report of imagegen's" in " ".join(result.stderr.split())
    assert notes.read_text() == "images: {}\n"
    tests = tmp_path / "test.json"
    tests.write_text('{"kind": "test", "images": []}\n')
    result = imagegen("build", "--image", "cpu", "--report", str(tests))
    assert result.returncode == 2 and "is a test report: writing the build report there" in " ".join(
        result.stderr.split())
    result = imagegen("test", "--image", "cpu", "--report", str(tmp_path))
    assert result.returncode == 2 and "is a directory; name a file" in result.stderr


def test_an_earlier_report_of_its_kind_may_be_replaced(tmp_path):
    from imagegen.stages.results import why_not_replaceable

    earlier = tmp_path / "push.json"
    earlier.write_text('{"kind": "push", "images": []}\n')
    assert why_not_replaceable(earlier, "push") is None and why_not_replaceable(tmp_path / "new.json", "push") is None


@pytest.mark.parametrize("registry", ["host/../x", "ghcr.io@127.0.0.1:5000/x", "http://evil", "ghcr.io/Acme",
                                      "ghcr.io//x", "-bad.io", "ghcr.io/acme/"])
def test_a_registry_outside_the_reference_grammar_is_refused_before_any_work(registry):
    from imagegen.engine.registry import registry_problem

    assert registry_problem(registry)
    result = imagegen("push", "--image", "cpu", "--registry", registry)
    assert result.returncode == 2 and "is not HOST[/NAMESPACE]" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("registry", ["ghcr.io/acme", "127.0.0.1:5000", "localhost:5000/a/b_c", "[::1]:5000/x",
                                      "registry.example.com/team-a/raw", "nvcr.io"])
def test_registries_the_grammar_allows(registry):
    from imagegen.engine.registry import registry_problem

    assert registry_problem(registry) is None
