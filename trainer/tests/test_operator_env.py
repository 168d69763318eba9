"""What each Kubernetes operator injects (operators.py), reproduced with two processes on this host as the job's two
pods (tests/test_image_trains.py does it with two containers of the image): exactly
Kubeflow Trainer v2's variables, then exactly a PyTorchJob's (see vlmgrpo/launch/schedulers.py for where each operator sets
them), and no launch flag: the two train one step as one job over gloo, and `--print-config` names each value's
variable. The addresses are 127.0.0.1, where the operators give a service name (`<job>-node-0-0.<job>`,
`<job>-master-0`); no Kubernetes API server runs here."""

import subprocess
import sys
import tempfile

import pytest
import yaml

from conftest import ENV, in_process, read_jsonl, train_args
from operators import OPERATORS
from test_train import free_port


def pod_environment(variables: dict) -> dict:
    """The test's environment without any launch variable of its own, plus the operator's."""
    launch = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "WORLD_SIZE", "RANK",
              "LOCAL_RANK", "TORCHELASTIC_RUN_ID")
    base = {key: value for key, value in ENV.items() if key not in launch and not key.startswith(("PET_", "SLURM_"))}
    return {**base, **variables}


@pytest.mark.slow  # two ranks under two torchruns, one GRPO step: about 22 s each here
@pytest.mark.parametrize("operator", list(OPERATORS))
def test_two_pods_with_exactly_the_operators_variables_train_as_one_job(operator, tiny, tmp_path):
    variables, sources = OPERATORS[operator]
    port = free_port()
    output = tmp_path / "out"
    args = train_args(tiny, output, "--max-steps", "1", "--save-steps", "1", "--batch-size", "2")
    printed = in_process(*args, "--print-config", check=True, env=pod_environment(variables(1, "127.0.0.1", port))).stdout
    assert printed.splitlines()[0] == f"# launcher: {operator}"
    lines = {line.split(":")[0]: line for line in printed.splitlines() if not line.startswith("#")}
    for key, variable in sources.items():
        assert f"  # from environment variable {variable}" in lines[key], (key, lines[key])
    assert yaml.safe_load(printed)["node_rank"] == 1 and yaml.safe_load(printed)["nnodes"] == 2
    pods = []
    with tempfile.TemporaryFile(mode="w+") as log0, tempfile.TemporaryFile(mode="w+") as log1:
        for rank, log in enumerate((log0, log1)):
            pods.append(subprocess.Popen([sys.executable, "-m", "vlmgrpo", *map(str, args)], stdout=log,
                                         stderr=subprocess.STDOUT, text=True, env=pod_environment(variables(rank, "127.0.0.1", port))))
        codes = [pod.wait(timeout=300) for pod in pods]
        logs = []
        for log in (log0, log1):
            log.seek(0)
            logs.append(log.read())
    tails = [log[-3000:] for log in logs]
    assert codes == [0, 0], tails
    assert [row["step"] for row in read_jsonl(output / "metrics.jsonl")] == [1]
    checkpoint = output / "checkpoint-1"
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}, tails
    # The second pod's launch line, near the top of its log: torch's agent on a node other than the store's may print
    # a long "failed to shutdown the rendezvous" trace after a run that exited 0 (the store's node left first).
    assert "--nnodes=2" in logs[1] and "--node-rank=1" in logs[1], tails[1]
