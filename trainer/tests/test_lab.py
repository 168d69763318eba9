"""`vlmgrpo lab`: the token is always required, the folder it serves, the example notebook, where its checks run.

JupyterLab itself is not installed beside the tests (.ci/setup says why): the real server, TensorBoard behind it and the checks are tested in the cpu image
(tests/test_image_lab.py, and the image's selftest in tests/test_image_trains.py and tests/test_pipeline.py)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from vlmgrpo.errors import UserError
from vlmgrpo.image.lab import EXAMPLE, WORKSPACE, announcement, choose_root, copy_example, plan_lab, token_from


def test_an_empty_token_is_refused_and_a_missing_one_generated():
    with pytest.raises(UserError, match="JUPYTER_TOKEN is set but empty"):
        token_from({"JUPYTER_TOKEN": "  "})
    token, generated = token_from({})
    assert generated and len(token) >= 32 and token != token_from({})[0]
    assert token_from({"JUPYTER_TOKEN": "chosen"}) == ("chosen", False)


def test_the_folder_is_the_one_asked_for_else_the_workspace_else_home_with_a_note(tmp_path):
    assert choose_root(str(tmp_path), {}) == (str(tmp_path), None)
    with pytest.raises(UserError, match="no such directory"):
        choose_root(str(tmp_path / "absent"), {})
    if not os.path.isdir(WORKSPACE):
        root, note = choose_root(None, {"HOME": str(tmp_path)})
        assert root == str(tmp_path) and WORKSPACE in note


def test_the_plan_listens_where_the_image_says_and_hands_the_token_to_jupyter(tmp_path):
    plan = plan_lab(8899, None, str(tmp_path), {"VLMGRPO_SERVE_HOST": "0.0.0.0", "JUPYTER_TOKEN": "t0ken"})
    assert "--ServerApp.ip=0.0.0.0" in plan.argv and "--ServerApp.port=8899" in plan.argv
    assert plan.environment["JUPYTER_TOKEN"] == "t0ken" and "t0ken" not in " ".join(plan.argv)  # not in `ps`
    assert plan.url == "http://127.0.0.1:8899/lab" and not plan.token_generated
    assert "--ServerApp.ip=127.0.0.1" in plan_lab(8899, None, str(tmp_path), {}).argv


def test_a_chosen_token_is_never_printed_and_a_generated_one_once(tmp_path):
    chosen = plan_lab(8899, None, str(tmp_path), {"JUPYTER_TOKEN": "my-s3cret"})
    assert announcement(chosen, 8899) == ("JupyterLab at http://127.0.0.1:8899/lab (token taken from JUPYTER_TOKEN, "
                                          "not shown; publish the port with -p 8899:8899)")
    generated = plan_lab(8899, None, str(tmp_path), {})
    token = generated.environment["JUPYTER_TOKEN"]
    assert announcement(generated, 8899).startswith(f"JupyterLab at http://127.0.0.1:8899/lab?token={token} (token "
                                                    "generated")


def test_the_example_is_copied_once_and_never_over_a_users_file(tmp_path):
    copied = copy_example(str(tmp_path))
    notebook = json.loads((tmp_path / EXAMPLE).read_text())
    assert copied == str(tmp_path / EXAMPLE) and notebook["nbformat"] == 4
    assert any("make-tiny" in "".join(cell["source"]) for cell in notebook["cells"])
    (tmp_path / EXAMPLE).write_text("mine")
    assert copy_example(str(tmp_path)) is None and (tmp_path / EXAMPLE).read_text() == "mine"


@pytest.mark.slow  # a vlmgrpo process: 3 s
def test_an_empty_token_is_one_line_and_exit_2_before_anything_else(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vlmgrpo", "lab", "--root-dir", str(tmp_path)], capture_output=True,
                          text=True, env=dict(os.environ, JUPYTER_TOKEN=""), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: JUPYTER_TOKEN is set but empty")


def test_the_lab_checks_run_only_where_the_image_names_jupyterlab(monkeypatch):
    from vlmgrpo.image import checks
    from vlmgrpo.image.checks import Context, run_checks
    from vlmgrpo.image.checks import lab as lab_check

    monkeypatch.setattr(checks, "installed_version", lambda name: None)  # as in an image without the lab extra

    for expected in ({"versions": {"torch": "2.14.1"}}, {"versions": {"jupyterlab": None}}):
        results = run_checks(Context(expected=expected), modules=[lab_check])  # the runner decides, by NEEDS
        assert [(r["name"], r["status"]) for r in results] == [("lab.server", "skip"), ("lab.kernel", "skip")]
        assert results[0]["detail"].startswith("no jupyterlab in this image (expected.json")


@pytest.mark.slow  # a vlmgrpo process: 3 s
@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is not None, reason="JupyterLab is installed here")
def test_without_jupyterlab_lab_says_where_to_get_it(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vlmgrpo", "lab", "--root-dir", str(tmp_path)], capture_output=True,
                          text=True, env=dict(os.environ, JUPYTER_TOKEN="chosen"), timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "JupyterLab is not installed here" in done.stderr and "vlmgrpo[lab]" in done.stderr
