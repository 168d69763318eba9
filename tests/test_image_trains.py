"""End to end, as a user runs the published image: `docker run ... IMAGE train` (and `sft`) with
the data and output mounted from the host, an arbitrary uid, `docker stop` and a resume, two
containers on one network as two hosts of one run, and two as the pods a Kubernetes operator starts."""

import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.docker_env import docker_cli as docker, unique_name
from tests.helpers import REPO

# Runs the cpu image the other session built: .ci/test runs it last in the session beside the main engine's
# build tests (tests/conftest.py).
pytestmark = pytest.mark.beside

USER = "4321:4321"  # no such user in the image: HOME and every cache must still work
VENV_BIN = REPO / ".venv" / "bin"



@pytest.fixture(scope="module")
def host_dirs(tmp_path_factory):
    """Tiny models made on the host (a vision-language model with a grounding set, a text-only one with chat rows),
    the examples' recipes pointing at them under /data, and an output dir the user owns."""
    root = tmp_path_factory.mktemp("e2e")
    data, out = root / "data", root / "out"
    for name, family in (("tiny", "qwen2_5_vl"), ("tiny-chat", "qwen2")):
        subprocess.run([str(VENV_BIN / "vlmgrpo"), "make-tiny", "--out", str(data / name), "--family", family],
                       check=True, capture_output=True)
    recipe = yaml.safe_load((REPO / "examples" / "rec_tiny.yaml").read_text())
    recipe.update(model_name_or_path="/data/tiny/model", output_dir="/out/run", max_steps=2, save_steps=2,
                  report_to="tensorboard", data=[{**recipe["data"][0], "path": "/data/tiny/data/rec.jsonl",
                                                  "image_root": "/data/tiny/data/images"}])
    (data / "rec_tiny.yaml").write_text(yaml.safe_dump(recipe))
    chat = yaml.safe_load((REPO / "examples" / "sft_chat_tiny.yaml").read_text())
    chat.update(model_name_or_path="/data/tiny-chat/model", output_dir="/out/sft", report_to="tensorboard",
                data=[f"/data/{path}" for path in chat["data"]])
    (data / "sft_chat_tiny.yaml").write_text(yaml.safe_dump(chat))
    # A copy as transformers saved it (model.safetensors 0600, owned by the host user): unreadable in the image.
    shutil.copytree(data / "tiny" / "model", root / "private-model")
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)  # readable by the uid that trains
    out.mkdir()
    uid, gid = map(int, USER.split(":"))
    os.chown(out, uid, gid)
    return {"data": data, "out": out, "private_model": root / "private-model"}


def run_args(image, dirs, name=None, network=None):
    """`docker run` as a user types it; with a name, detached so that it can be stopped."""
    return ["run", *(["-d", "--name", name] if name else ["--rm"]), *(["--network", network] if network else []),
            "--user", USER, "-v", f"{dirs['data']}:/data:ro", "-v", f"{dirs['out']}:/out", image]


def metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_train_writes_checkpoint_and_metrics_owned_by_the_caller(image_under_test, host_dirs):
    result = docker(*run_args(image_under_test["id"], host_dirs), "train", "--config", "/data/rec_tiny.yaml")
    run = host_dirs["out"] / "run"
    steps = [row["step"] for row in metrics(run / "metrics.jsonl")]
    assert steps[-1] == 2, result.stdout[-2000:]
    checkpoint = run / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file() or list(checkpoint.glob("*.safetensors"))
    owners = {(p.stat().st_uid, p.stat().st_gid) for p in run.rglob("*")}
    assert owners == {(4321, 4321)}
    assert list(run.glob("runs/*/events.out.tfevents.*")), "report_to: tensorboard wrote no event file"
    assert all("clip_ratio" in row for row in metrics(run / "metrics.jsonl"))


def test_bad_inputs_fail_before_the_model_loads(image_under_test, host_dirs):
    """Weights saved 0600 by another user, and an output directory the training uid cannot write."""
    weights = "/private/model.safetensors"
    result = docker("run", "--rm", "--user", USER, "-v", f"{host_dirs['private_model']}:/private:ro",
                    "-v", f"{host_dirs['data']}:/data:ro", image_under_test["id"], "train", "--config", "/data/rec_tiny.yaml",
                    "--model", "/private", "--output", "/tmp/run", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().endswith(f"{weights} is not readable by uid 4321 (mode 0600, owner uid "
                                          f"{os.getuid()}); make it readable: chmod a+r {weights}")
    result = docker(*run_args(image_under_test["id"], host_dirs), "train", "--config", "/data/rec_tiny.yaml",
                    "--output", "/data/run", "--dry-run", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "key 'output_dir': cannot write to /data (to create /data/run in it) as uid 4321" in result.stderr
    result = docker(*run_args(image_under_test["id"], host_dirs), "sft", "--config", "/data/sft_chat_tiny.yaml",
                    "--output", "/out/qlora", "--set", "use_lora=true", "--set", "load_in_4bit=true", check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "error: command line: key 'load_in_4bit': QLoRA needs an NVIDIA GPU (bitsandbytes' 4-bit layers run on CUDA "
        "only) and none is visible here; run on a GPU host (docker run --gpus all with a CUDA image), or drop "
        "load_in_4bit to train LoRA on the full-precision model"]


def test_selftest_passes_inside_the_image(image_under_test):
    result = docker("run", "--rm", image_under_test["id"], "selftest", timeout=600)
    report = json.loads(result.stdout)
    assert report["failed"] == 0
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["train.tiny_grpo"] == statuses["lab.server"] == statuses["lab.kernel"] == "pass"
    infiniband = {c["name"]: c for c in report["checks"]}["net.infiniband"]  # the RDMA user space NCCL loads
    assert infiniband["status"] == "skip" and "libibverbs.so.1 loads" in infiniband["detail"]


def test_any_other_command_runs_as_given(image_under_test):
    result = docker("run", "--rm", "--user", USER, image_under_test["id"], "python", "-c",
                    "import os, torch; print(os.getuid(), os.access(os.environ['HOME'], os.W_OK), torch.__version__)")
    assert result.stdout.split() == ["4321", "True", "2.14.1+cu130"]


def test_vlmgrpo_trains_without_the_entrypoint_as_any_uid(image_under_test, host_dirs):
    """pyxis/enroot and Apptainer's `exec` skip the image's ENTRYPOINT: `vlmgrpo` on PATH sets up its own HOME and
    caches, so `--entrypoint vlmgrpo` trains as `docker run IMAGE train` does, as a uid the image does not know."""
    output = host_dirs["out"] / "no-entrypoint"
    output.mkdir()
    output.chmod(0o777)  # uid 12345 writes here; the host's out/ belongs to USER
    plain = ["run", "--rm", "--entrypoint", "vlmgrpo", "--user", "12345", "-v", f"{host_dirs['data']}:/data:ro",
             "-v", f"{host_dirs['out']}:/out", image_under_test["id"]]
    found = json.loads(docker(*plain, "info").stdout)["environment"]
    assert found["uid"] == 12345 and found["USER"] == "uid12345" and found["HOME"].startswith("/tmp/home.")
    assert found["TRITON_CACHE_DIR"] == f"{found['HOME']}/.cache/triton"
    docker(*plain, "train", "--config", "/data/rec_tiny.yaml", "--output", "/out/no-entrypoint/run", "--max-steps", "1",
           "--save-steps", "1")
    assert [row["step"] for row in metrics(output / "run" / "metrics.jsonl")] == [1]
    assert (output / "run" / "checkpoint-1" / "trainer_state.json").is_file()


def test_docker_stop_leaves_a_checkpoint_that_a_second_run_resumes(image_under_test, host_dirs):
    name = f"imagegen-e2e-{os.getpid()}"
    run = host_dirs["out"] / "stopped"
    docker(*run_args(image_under_test["id"], host_dirs, name=name), "train", "--config", "/data/rec_tiny.yaml",
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

    docker(*run_args(image_under_test["id"], host_dirs), "train", "--config", "/data/rec_tiny.yaml",
           "--output", "/out/stopped", "--max-steps", str(saved_step + 2), "--save-steps", "1000",
           "--resume", "auto")
    resumed = [row["step"] for row in metrics(run / "metrics.jsonl")[steps_before:]]
    assert resumed[0] == saved_step + 1 and resumed[-1] == saved_step + 2


def test_sft_stops_on_docker_stop_resumes_at_the_next_step_and_merges(image_under_test, host_dirs):
    """`docker run --user UID:GID ... IMAGE sft --config ...`: LoRA on the three chat formats of a text-only model
    with a validation split, `docker stop` (a checkpoint, exit 143), `--resume auto` at the next step, merged."""
    name = unique_name("imagegen-sft")
    run = host_dirs["out"] / "sft"
    docker(*run_args(image_under_test["id"], host_dirs, name=name), "sft", "--config", "/data/sft_chat_tiny.yaml",
           "--max-steps", "500", "--save-steps", "1000")
    try:
        wait_for_step(run / "metrics.jsonl", 1, [name])
        docker("stop", "--time", "60", name)
        exit_code = docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    finally:
        logs = docker("logs", name, check=False)
        docker("rm", "-f", name, check=False)
    assert exit_code == "143", logs.stdout[-2000:] + logs.stderr[-2000:]
    assert "trainable parameters:" in logs.stderr
    (checkpoint,) = run.glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])

    docker(*run_args(image_under_test["id"], host_dirs), "sft", "--config", "/data/sft_chat_tiny.yaml",
           "--max-steps", str(step + 2), "--save-steps", "1000", "--resume", "auto")
    rows = metrics(run / "metrics.jsonl")
    assert [row["step"] for row in rows if "loss" in row] == list(range(1, step + 3))
    # eval_steps 2, and transformers evaluates after the last step too.
    assert [row["step"] for row in rows if "eval_loss" in row] == sorted({*range(2, step + 3, 2), step + 2})
    assert (run / "adapter" / "adapter_model.safetensors").is_file() and (run / "merged" / "model.safetensors").is_file()
    assert list(run.glob("runs/*/events.out.tfevents.*"))
    assert {(p.stat().st_uid, p.stat().st_gid) for p in run.rglob("*")} == {(4321, 4321)}


def wait_for_step(path: Path, step: int, names: list[str], timeout: int = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(row.get("step", 0) >= step for row in metrics(path)):
            return
        time.sleep(1)
    logs = {name: docker("logs", name, check=False).stderr[-2000:] for name in names}
    pytest.fail(f"no step {step} in {path} within {timeout} s: {logs}")


def two_hosts_until_stopped(image, dirs, network, output, stop_rank, *extra):
    """Rank 0 and rank 1, one container each on the network, until `docker stop` of the container of stop_rank.
    Returns (exit codes by rank, logs by rank)."""
    names = [unique_name("imagegen-node0"), unique_name("imagegen-node1")]
    common = ["train", "--config", "/data/rec_tiny.yaml", "--output", output, "--max-steps", "500", "--save-steps",
              "1000", "--batch-size", "2", "--nnodes", "2", "--master-addr", names[0], "--master-port", "29500",
              *extra]
    progress = dirs["out"] / output.removeprefix("/out/") / "metrics.jsonl"
    first_new_step = max((row["step"] for row in metrics(progress)), default=0) + 1
    try:
        for rank, name in enumerate(names):
            docker(*run_args(image, dirs, name=name, network=network), *common, "--node-rank", str(rank))
        wait_for_step(progress, first_new_step, names)
        docker("stop", "--time", "120", names[stop_rank], timeout=300)
        codes = [docker("wait", name, timeout=300).stdout.strip() for name in names]
        logs = [docker("logs", name, check=False) for name in names]
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
    return codes, [log.stdout[-2000:] + log.stderr[-3000:] for log in logs]


def test_two_containers_train_as_two_hosts_and_stop_together(image_under_test, host_dirs):
    """torchrun --nnodes 2 on the CPU (gloo) across two containers of a user-defined network: both ranks train in
    step, rank 0 writes one checkpoint holding both ranks' state, and `docker stop` of either container makes both
    checkpoint at the same step and exit 143; the second run resumes the first's checkpoint."""
    network = unique_name("imagegen-hosts")
    docker("network", "create", network)
    run = host_dirs["out"] / "two-hosts"
    try:
        stopped_steps = []
        for stop_rank, extra in ((0, []), (1, ["--resume", "auto"])):
            before = {p.name for p in run.glob("checkpoint-*")}
            codes, logs = two_hosts_until_stopped(image_under_test["id"], host_dirs, network, "/out/two-hosts", stop_rank,
                                                  *extra)
            assert codes == ["143", "143"], logs
            (checkpoint,) = [p for p in run.glob("checkpoint-*") if p.name not in before]  # one per stop
            assert (checkpoint / "trainer_state.json").is_file() and (checkpoint / "model.safetensors").is_file()
            assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
            step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
            assert [row["step"] for row in metrics(run / "metrics.jsonl")] == list(range(1, step + 1))
            stopped_steps.append(step)
        assert stopped_steps[1] > stopped_steps[0]
    finally:
        docker("network", "rm", network, check=False)


def _operators() -> dict:
    """trainer/tests/operators.py, read by file: the trainer's tests have a conftest of their own."""
    spec = importlib.util.spec_from_file_location("imagegen_operators", REPO / "trainer" / "tests" / "operators.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OPERATORS


OPERATORS = _operators()


@pytest.mark.parametrize("operator", list(OPERATORS))
def test_two_pods_of_the_image_with_exactly_an_operators_variables_train_as_one_job(operator, image_under_test,
                                                                                   host_dirs):
    """Two containers on one network as the job's two pods, each with exactly the variables the operator injects
    (the master's address a name, as the operators give a service name) and no launch flag: `--print-config` names
    the operator and each value's variable, and the two train one step as one gloo job."""
    variables, sources = OPERATORS[operator]
    network, names = unique_name("imagegen-pods"), [unique_name("imagegen-pod0"), unique_name("imagegen-pod1")]
    output = "/out/" + operator.lower().replace(" ", "-")

    def pod(rank: int, name: str | None, *command: str) -> list[str]:
        args = run_args(image_under_test["id"], host_dirs, name=name, network=network)
        injected = variables(rank, names[0], 29500)
        args[-1:-1] = [flag for key, value in injected.items() for flag in ("-e", f"{key}={value}")]
        return [*args, "train", "--config", "/data/rec_tiny.yaml", "--output", output, "--max-steps", "1",
                "--save-steps", "1", "--batch-size", "2", *command]

    docker("network", "create", network)
    try:
        printed = docker(*pod(1, None, "--print-config")).stdout
        assert printed.splitlines()[0] == f"# launcher: {operator}", printed
        lines = {line.split(":")[0]: line for line in printed.splitlines() if not line.startswith("#")}
        for key, variable in sources.items():
            assert f"  # from environment variable {variable}" in lines[key], (key, lines[key])
        for rank, name in enumerate(names):
            docker(*pod(rank, name))
        codes = [docker("wait", name, timeout=600).stdout.strip() for name in names]
        logs = [docker("logs", name, check=False) for name in names]
        assert codes == ["0", "0"], [log.stdout[-2000:] + log.stderr[-3000:] for log in logs]
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)
    run = host_dirs["out"] / output.removeprefix("/out/")
    assert [row["step"] for row in metrics(run / "metrics.jsonl") if "loss" in row] == [1]
    checkpoint = run / "checkpoint-1"
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
