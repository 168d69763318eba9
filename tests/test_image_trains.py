"""End to end, as a user runs the published image: `docker run ... IMAGE train` with the
data and output mounted from the host, an arbitrary uid, `docker stop` and a resume."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO

USER = "4321:4321"  # no such user in the image: HOME and every cache must still work
VENV_BIN = REPO / ".venv" / "bin"


def docker(*args, timeout=900, check=True):
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def host_dirs(tmp_path_factory):
    """A tiny model and grounding set made on the host, and an output dir the user owns."""
    root = tmp_path_factory.mktemp("e2e")
    data, out = root / "data", root / "out"
    subprocess.run([str(VENV_BIN / "vlmgrpo"), "make-tiny", "--out", str(data / "tiny")], check=True,
                   capture_output=True)
    recipe = yaml.safe_load((REPO / "examples" / "rec_tiny.yaml").read_text())
    recipe.update(model_name_or_path="/data/tiny/model", output_dir="/out/run", max_steps=2, save_steps=2,
                  data=[{**recipe["data"][0], "path": "/data/tiny/data/rec.jsonl",
                         "image_root": "/data/tiny/data/images"}])
    (data / "rec_tiny.yaml").write_text(yaml.safe_dump(recipe))
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)  # readable by the uid that trains
    out.mkdir()
    uid, gid = map(int, USER.split(":"))
    os.chown(out, uid, gid)
    return {"data": data, "out": out}


def run_args(image, dirs, name=None):
    """`docker run` as a user types it; with a name, detached so that it can be stopped."""
    return ["run", *(["-d", "--name", name] if name else ["--rm"]), "--user", USER,
            "-v", f"{dirs['data']}:/data:ro", "-v", f"{dirs['out']}:/out", image]


def metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_train_writes_checkpoint_and_metrics_owned_by_the_caller(cpu_image, host_dirs):
    result = docker(*run_args(cpu_image["ref"], host_dirs), "train", "--config", "/data/rec_tiny.yaml")
    run = host_dirs["out"] / "run"
    steps = [row["step"] for row in metrics(run / "metrics.jsonl")]
    assert steps[-1] == 2, result.stdout[-2000:]
    checkpoint = run / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file() or list(checkpoint.glob("*.safetensors"))
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in run.rglob("*")}
    assert owners == {(4321, 4321)}


def test_selftest_passes_inside_the_image(cpu_image):
    result = docker("run", "--rm", cpu_image["ref"], "selftest", timeout=600)
    report = json.loads(result.stdout)
    assert report["failed"] == 0
    assert {c["name"]: c["status"] for c in report["checks"]}["train.tiny_grpo"] == "pass"


def test_any_other_command_runs_as_given(cpu_image):
    result = docker("run", "--rm", "--user", USER, cpu_image["ref"], "python", "-c",
                    "import os, torch; print(os.getuid(), os.access(os.environ['HOME'], os.W_OK), torch.__version__)")
    assert result.stdout.split() == ["4321", "True", "2.14.1+cu130"]


def test_docker_stop_leaves_a_checkpoint_that_a_second_run_resumes(cpu_image, host_dirs):
    name = f"imagegen-e2e-{os.getpid()}"
    run = host_dirs["out"] / "stopped"
    docker(*run_args(cpu_image["ref"], host_dirs, name=name), "train", "--config", "/data/rec_tiny.yaml",
           "--output", "/out/stopped", "--max-steps", "500", "--save-steps", "1000")
    try:
        deadline = time.monotonic() + 300
        while not metrics(run / "metrics.jsonl") and time.monotonic() < deadline:
            time.sleep(1)
        assert metrics(run / "metrics.jsonl"), docker("logs", name, check=False).stderr[-3000:]
        docker("stop", "--time", "60", name)
        exit_code = docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    finally:
        logs = docker("logs", name, check=False)
        docker("rm", "-f", name, check=False)
    assert exit_code in ("0", "143"), logs.stdout[-2000:] + logs.stderr[-2000:]
    checkpoints = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert checkpoints, logs.stderr[-3000:]
    saved_step = int(checkpoints[-1].name.split("-")[1])
    steps_before = len(metrics(run / "metrics.jsonl"))

    docker(*run_args(cpu_image["ref"], host_dirs), "train", "--config", "/data/rec_tiny.yaml",
           "--output", "/out/stopped", "--max-steps", str(saved_step + 2), "--save-steps", "1000",
           "--resume", "auto")
    resumed = [row["step"] for row in metrics(run / "metrics.jsonl")[steps_before:]]
    assert resumed[0] == saved_step + 1 and resumed[-1] == saved_step + 2
