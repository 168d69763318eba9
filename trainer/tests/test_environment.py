"""`vlmgrpo` sets up its own HOME and caches for any uid, so it works without the image's entrypoint (pyxis/enroot
and Apptainer's `exec` skip it): `docker run --entrypoint vlmgrpo IMAGE train ...` as `docker run IMAGE train ...`."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ENV
from vlmgrpo.image import environment
from vlmgrpo.image.environment import prepare


def test_an_unset_or_unwritable_home_becomes_a_fresh_directory(tmp_path):
    for home in (None, "/dev/null", "/nonexistent"):
        env = {"TMPDIR": str(tmp_path)} if home is None else {"HOME": home, "TMPDIR": str(tmp_path)}
        changed = prepare(env)
        assert env["HOME"].startswith(f"{tmp_path}/home.") and os.access(env["HOME"], os.W_OK), home
        assert env["XDG_CACHE_HOME"] == f"{env['HOME']}/.cache"
        assert env["TORCH_EXTENSIONS_DIR"] == f"{env['HOME']}/.cache/torch_extensions"
        assert env["TRITON_CACHE_DIR"] == f"{env['HOME']}/.cache/triton"
        assert env["MPLCONFIGDIR"] == f"{env['HOME']}/.cache/matplotlib"
        assert {"HOME", "XDG_CACHE_HOME"} <= set(changed)


def test_what_is_set_and_writable_stays_and_a_second_call_changes_nothing(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": "/elsewhere", "TRITON_CACHE_DIR": "/mine", "USER": "me"}
    assert prepare(env) == {"TORCH_EXTENSIONS_DIR": "/elsewhere/torch_extensions",
                            "MPLCONFIGDIR": "/elsewhere/matplotlib"}
    assert env["HOME"] == str(tmp_path) and env["TRITON_CACHE_DIR"] == "/mine"
    assert prepare(env) == {}


def test_no_writable_place_for_home_is_one_line_and_exit_2(monkeypatch, capsys):
    """issue 53, item 14: `docker run --read-only` without `--tmpfs /tmp` (HOME, TMPDIR and /tmp all read-only) was
    a 27-line traceback making a HOME. Here the temporary directory is one no uid can create a directory in."""
    from click.testing import CliRunner

    from vlmgrpo.commands.cli import main

    monkeypatch.setattr(environment, "writable_temporary_directory", lambda environ: "/proc")
    env = {"HOME": "/nonexistent", "TMPDIR": "/proc"}
    with pytest.raises(environment.NoWritableHome, match="no writable directory for HOME: HOME \\(/nonexistent\\)"):
        prepare(env)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["info"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: no writable directory for HOME") and "--tmpfs /tmp" in result.output
    assert environment.main(["true"]) == 2 and "--tmpfs /tmp" in capsys.readouterr().err


def test_a_uid_without_a_passwd_entry_gets_a_user_name(tmp_path, monkeypatch):
    """getpass.getuser() (torch's inductor and triton caches) raises for a uid the password database lacks."""
    monkeypatch.setattr(environment, "known_user", lambda uid: False)
    env = {"HOME": str(tmp_path)}
    assert prepare(env)["USER"] == f"uid{os.getuid()}"
    env = {"HOME": str(tmp_path), "LOGNAME": "someone"}
    assert "USER" not in prepare(env)


def as_uid(command, env, uid=12345):
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as another uid")
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_vlmgrpo_itself_sets_up_home_and_caches_for_an_arbitrary_uid():
    """`python -m vlmgrpo info` as uid 12345 (no passwd entry) with HOME unset, no entrypoint: its HOME is a fresh
    writable directory with every cache under it (an unwritable HOME is the unit tests' and the next test's)."""
    env = {key: value for key, value in ENV.items() if key not in ("HOME", "USER", "LOGNAME", "XDG_CACHE_HOME",
                                                                   "HF_HOME", "TMPDIR")}
    result = as_uid([sys.executable, "-m", "vlmgrpo", "info"], env)
    if result.returncode and "Permission denied" in result.stderr:
        pytest.skip(f"uid 12345 cannot run this Python: {result.stderr.strip()[-200:]}")
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout)["environment"]
    assert found["uid"] == 12345 and found["USER"] == "uid12345"
    assert found["HOME"].startswith("/tmp/home.") and found["XDG_CACHE_HOME"] == f"{found['HOME']}/.cache"
    assert found["TRITON_CACHE_DIR"] == f"{found['HOME']}/.cache/triton"


def test_any_other_command_runs_with_the_same_environment():
    """The image's entrypoint runs every other command through `python -m vlmgrpo.image.environment`."""
    env = {key: value for key, value in ENV.items() if key not in ("USER", "LOGNAME", "XDG_CACHE_HOME")}
    result = as_uid([sys.executable, "-m", "vlmgrpo.image.environment", "sh", "-c",
                     'touch "$HOME/probe" && echo "$USER $TORCH_EXTENSIONS_DIR"'], env)
    assert result.returncode == 0, result.stderr
    user, extensions = result.stdout.split()
    assert user == "uid12345" and extensions.endswith("/.cache/torch_extensions")
    missing = subprocess.run([sys.executable, "-m", "vlmgrpo.image.environment", "no-such-command"], capture_output=True,
                             text=True, env=ENV, timeout=60)
    assert missing.returncode == 127 and missing.stderr.startswith("error: no-such-command: ")
