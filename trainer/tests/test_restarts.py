"""Restarts and a full disk: a killed worker is restarted by torchrun from the newest checkpoint (--max-restarts),
and a disk that fills while a checkpoint is written ends the run with one line."""

import errno
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from conftest import ENV, read_jsonl, train_args
from vlmgrpo.training.checkpoint import RECORD, latest_checkpoint
from vlmgrpo.launch.torchrun import needs_launch, torchrun_command, worker_of
from vlmgrpo.config.sections import RunConfig
from vlmgrpo.training.storage import is_out_of_space


def test_restarts_launch_through_torchrun_with_its_budget():
    run = RunConfig(max_restarts=2)
    assert needs_launch(run) and "--max-restarts=2" in torchrun_command(run, ["train"])
    assert not needs_launch(RunConfig()) and not any("max-restarts" in a for a in torchrun_command(RunConfig(), []))


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device"),
    RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
                 'device" })'),
])
def test_a_full_disk_is_recognised_from_each_writer(error, tmp_path):
    assert is_out_of_space(error, str(tmp_path), need=1)


def test_a_failed_write_counts_only_when_the_disk_is_full(tmp_path):
    write_failed = RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
                                "data/0: file write failed")
    assert not is_out_of_space(write_failed, str(tmp_path), need=1)  # plenty of room here: another cause
    assert is_out_of_space(write_failed, str(tmp_path), need=1 << 60)
    assert not is_out_of_space(ValueError("a bad value"), str(tmp_path), need=1 << 60)


def test_the_worker_is_found_under_torchrun_not_torchrun_itself():
    """The tree torchrun_command makes, of stand-ins: vlmgrpo -> `-m torch.distributed.run ... -m vlmgrpo` ->
    `-m vlmgrpo` worker, each a sleeping Python whose command line carries those arguments."""
    sleeper = "import subprocess, sys, time; {spawn}time.sleep(60)"
    worker = [sys.executable, "-c", sleeper.format(spawn=""), "-m", "vlmgrpo", "train"]
    torchrun = [sys.executable, "-c", sleeper.format(spawn=f"subprocess.Popen({worker!r}); "), "-m",
                "torch.distributed.run", "--max-restarts=1", "-m", "vlmgrpo", "train"]
    launcher = subprocess.Popen([sys.executable, "-c", sleeper.format(spawn=f"subprocess.Popen({torchrun!r}); ")])
    try:
        deadline = time.monotonic() + 30
        while len(psutil.Process(launcher.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = worker_of(launcher.pid)
        assert "torch.distributed.run" in found.parent().cmdline()  # torchrun's child, not torchrun
    finally:
        for process in [*psutil.Process(launcher.pid).children(recursive=True), psutil.Process(launcher.pid)]:
            process.kill()
        launcher.wait()


@pytest.mark.slow
def test_a_killed_worker_restarts_from_its_checkpoint_and_the_run_ends_at_its_last_step(tiny, tmp_path):
    output = tmp_path / "out"
    command = [sys.executable, "-m", "vlmgrpo", *map(str, train_args(
        tiny, output, "--max-steps", "4", "--save-steps", "1", "--max-restarts", "1"))]
    with tempfile.TemporaryFile(mode="w+") as errors:
        launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=ENV)
        for line in launcher.stdout:
            if line.startswith("step 2/"):
                worker_of(launcher.pid).send_signal(signal.SIGKILL)  # the worker, not the launcher or torchrun
                break
        launcher.communicate(timeout=300)
        errors.seek(0)
        stderr = errors.read()
    assert launcher.returncode == 0, stderr[-3000:]
    metrics = read_jsonl(output / "metrics.jsonl")
    restarts = [m for m in metrics if "restart" in m]
    assert len(restarts) == 1 and restarts[0]["restart"] == 1 and restarts[0]["step"] in (1, 2)
    steps = [m["step"] for m in metrics if "loss" in m]
    assert steps == sorted(set(steps)) and steps[-1] == 4  # every step once, to the end
    assert f"restart 1 of 1 after a worker failed: continuing from checkpoint-{restarts[0]['step']}" in stderr


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB filesystem: room for the run's logs and one checkpoint of the tiny model (2.8 MB), not two."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN): {done.stderr.decode()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_a_disk_that_fills_during_a_checkpoint_ends_the_run_with_one_line(tiny, small_disk):
    output = small_disk / "out"
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", *map(str, train_args(
        tiny, output, "--max-steps", "2", "--save-steps", "1"))], capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "room for 1 checkpoint(s) of about 2.8 MB" in result.stderr  # warned at start
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "filled while the checkpoint of step 2 was written" in error[0], result.stderr[-2000:]
    assert "removed the incomplete checkpoint-2" in error[0]
    assert "the newest complete checkpoint is checkpoint-1: free space, then continue with --resume auto" in error[0]
    assert [path.name for path in output.glob("checkpoint-*")] == ["checkpoint-1"]
    assert latest_checkpoint(str(output)) == str(output / "checkpoint-1")  # what --resume auto continues from


@pytest.mark.slow
def test_a_file_size_limit_hit_during_a_checkpoint_ends_the_run_with_one_line(tiny, tmp_path):
    """issue 53, item 13: `ulimit -f` (RLIMIT_FSIZE, as schedulers set it) under a checkpoint's largest file was a
    78-line traceback (EFBIG), not the one line a full disk gets."""
    import resource

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_500_000, resource.RLIM_INFINITY))

    output = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", *map(str, train_args(
        tiny, output, "--max-steps", "2", "--save-steps", "1"))], capture_output=True, text=True, env=ENV, timeout=300,
        preexec_fn=limited)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "grew past this process's file size limit (1.5 MB: ulimit -f" in error[0], \
        result.stderr[-2000:]
    assert not [path for path in output.glob("checkpoint-*") if not (path / RECORD).exists()]  # none half-written
