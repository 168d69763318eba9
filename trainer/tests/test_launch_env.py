"""The launch from each scheduler's environment, exactly as it sets it (sources in vlmgrpo/launch/schedulers.py), and
`--print-config` naming where each value came from."""

import subprocess
import sys

import pytest
import yaml

from conftest import ENV, in_process
from vlmgrpo.errors import LaunchError
from vlmgrpo.launch.schedulers import discover, expand_nodelist, first_host

# What a pod or task has besides the launch (the Kubernetes service links, JobSet's index, Slurm's job facts).
NOISE = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "HOSTNAME": "pod-1"}
# kubeflow/trainer torch.go EnforceMLPolicy for a TrainJob "grpo" with numNodes 2, numProcPerNode 2: the PET_
# variables, and JobSet's completion index the node rank is read from.
TRAINER_V2 = {**NOISE, "PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
              "PET_MASTER_ADDR": "grpo-node-0-0.grpo", "PET_MASTER_PORT": "29500", "JOB_COMPLETION_INDEX": "1"}
# training-operator envvar.go setPodEnv and master.go for the second pod (Worker 0) of a PyTorchJob "grpo" with one
# Master and one Worker and the Master's pytorchjob-port 23456.
PYTORCHJOB = {**NOISE, "PYTHONUNBUFFERED": "0", "MASTER_PORT": "23456", "MASTER_ADDR": "grpo-master-0",
              "WORLD_SIZE": "2", "RANK": "1"}
# srun -N3 --ntasks-per-node=1 in a job on node[01-02,07]: the task on the second node.
SLURM = {**NOISE, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[01-02,07]", "SLURM_NODELIST": "node[01-02,07]",
         "SLURM_STEP_NODELIST": "node[01-02,07]", "SLURM_NNODES": "3", "SLURM_JOB_NUM_NODES": "3",
         "SLURM_STEP_NUM_NODES": "3", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
         "SLURM_NTASKS": "3", "SLURM_STEP_NUM_TASKS": "3", "SLURM_TASKS_PER_NODE": "1(x3)"}
# What torchrun gives worker 3 of 2 nodes x 2 processes, in a pod that also has Trainer v2's variables.
WORKER = {**TRAINER_V2, "LOCAL_RANK": "1", "RANK": "3", "GROUP_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
          "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "grpo-node-0-0.grpo", "MASTER_PORT": "29500",
          "TORCHELASTIC_RUN_ID": "none"}


def test_kubeflow_trainer_v2():
    launch = discover(TRAINER_V2)
    assert launch.launcher == "Kubeflow Trainer v2" and not launch.worker()
    assert launch.values == {"nnodes": (2, "PET_NNODES"), "nproc_per_node": (2, "PET_NPROC_PER_NODE"),
                             "node_rank": (1, "PET_NODE_RANK"), "master_addr": ("grpo-node-0-0.grpo", "PET_MASTER_ADDR"),
                             "master_port": (29500, "PET_MASTER_PORT")}


@pytest.mark.parametrize("word, gpus, expected", [("auto", 8, 8), ("auto", 0, 1), ("gpu", 4, 4)])
def test_trainer_v2_process_counts_in_words(word, gpus, expected):
    launch = discover({**TRAINER_V2, "PET_NPROC_PER_NODE": word}, gpu_count=lambda: gpus)
    assert launch.values["nproc_per_node"] == (expected, f"PET_NPROC_PER_NODE={word} ({gpus} GPUs visible)")


def test_pytorchjob_counts_pods_as_hosts():
    launch = discover(PYTORCHJOB)
    assert launch.launcher == "PyTorchJob"
    assert launch.values == {"nnodes": (2, "WORLD_SIZE"), "node_rank": (1, "RANK"),
                             "master_addr": ("grpo-master-0", "MASTER_ADDR"), "master_port": (23456, "MASTER_PORT")}


def test_slurm_one_task_per_node():
    launch = discover(SLURM)
    assert launch.launcher == "Slurm"
    assert launch.values == {"node_rank": (1, "SLURM_NODEID"), "nnodes": (3, "SLURM_STEP_NUM_NODES"),
                             "master_addr": ("node01", "SLURM_STEP_NODELIST (first of node[01-02,07])")}
    # An allocation's variables without a step's (the older names only).
    older = {key: value for key, value in SLURM.items() if not key.startswith("SLURM_STEP_")}
    assert discover(older).values["nnodes"] == (3, "SLURM_NNODES")
    assert discover(older).values["master_addr"][1] == "SLURM_JOB_NODELIST (first of node[01-02,07])"


def test_a_torchrun_worker_is_never_launched_again():
    launch = discover(WORKER)
    assert launch.worker() and launch.launcher == "torchrun worker"
    assert launch.values == {"nnodes": (2, "GROUP_WORLD_SIZE"), "node_rank": (1, "GROUP_RANK"),
                             "nproc_per_node": (2, "LOCAL_WORLD_SIZE"),
                             "master_addr": ("grpo-node-0-0.grpo", "MASTER_ADDR"), "master_port": (29500, "MASTER_PORT")}
    assert discover({"LOCAL_RANK": "0"}).worker()  # another launcher's worker: no numbers, still no launch


def test_plain_variables_and_nothing():
    launch = discover({"NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "NPROC_PER_NODE": "8"})
    assert launch.launcher == "environment"
    assert launch.values["nnodes"] == (2, "NNODES") and launch.values["master_addr"] == ("10.0.0.1", "MASTER_ADDR")
    assert discover(NOISE).launcher == "none (one host)" and discover(NOISE).values == {}


def test_agreeing_variables_name_both_and_flags_win():
    launch = discover({**SLURM, "NNODES": "3", "MASTER_PORT": "29400"})
    assert launch.values["nnodes"] == (3, "SLURM_STEP_NUM_NODES = NNODES")
    assert launch.values["master_port"] == (29400, "MASTER_PORT")
    given = discover({**SLURM, "NNODES": "5"}, given={"nnodes"})  # --nnodes: no variable is read for it
    assert "nnodes" not in given.values and given.launcher == "Slurm"


@pytest.mark.parametrize("environ, message", [
    ({"NNODES": "2", "SLURM_NODEID": "0", "SLURM_NNODES": "3"},
     "SLURM_NNODES=3 and NNODES=2 disagree on nnodes; unset one of them, or pass --nnodes"),
    ({**TRAINER_V2, "WORLD_SIZE": "3", "RANK": "1"},
     "PET_NNODES=2 and WORLD_SIZE=3 disagree on nnodes; unset one of them, or pass --nnodes"),
    ({**PYTORCHJOB, "PET_MASTER_ADDR": "elsewhere"},
     "PET_MASTER_ADDR=elsewhere and MASTER_ADDR=grpo-master-0 disagree on master_addr; unset one of them, or pass "
     "--master-addr"),
    ({**SLURM, "SLURM_NTASKS": "24", "SLURM_STEP_NUM_TASKS": "24", "SLURM_PROCID": "9"},
     "Slurm started 24 tasks on 3 nodes (SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES): start one task per node (srun "
     "--ntasks-per-node=1); vlmgrpo starts each node's processes itself (--nproc-per-node)"),
    ({**TRAINER_V2, "PET_NNODES": "1:4"}, "PET_NNODES=1:4: elastic node ranges are not supported; give the job a fixed "
     "numNodes"),
    ({**TRAINER_V2, "PET_NPROC_PER_NODE": "gpu"}, "PET_NPROC_PER_NODE=gpu: no GPU is visible here; give the pod GPUs, "
     "or set numProcPerNode to a number"),
    ({"NNODES": "two"}, "NNODES='two': not a whole number"),
])
def test_contradictions_and_bad_values_are_one_line(environ, message):
    with pytest.raises(LaunchError) as raised:
        discover(environ)
    assert str(raised.value) == message


@pytest.mark.parametrize("nodelist, hosts", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu-a100-[9-11],cpu1", ["gpu-a100-9", "gpu-a100-10", "gpu-a100-11", "cpu1"]),
    ("r[1-2]n[08-09]", ["r1n08", "r1n09", "r2n08", "r2n09"]),
    ("login,c[1,3]x", ["login", "c1x", "c3x"]),
    ("single", ["single"]),
])
def test_slurm_host_lists_expand_as_scontrol_show_hostnames(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts
    assert first_host(nodelist) == hosts[0]


def test_a_bad_host_list_is_one_line():
    with pytest.raises(LaunchError, match=r"cannot read the Slurm host list range \[a-b\]"):
        first_host("node[a-b]")


def test_print_config_names_the_launcher_and_each_values_variable(tiny):
    result = in_process("train", "--model", tiny["model"], "--data", tiny["data"], "--nproc-per-node", "1",
                        "--print-config", check=True, env={**ENV, **TRAINER_V2})
    lines = result.stdout.splitlines()
    assert lines[0] == "# launcher: Kubeflow Trainer v2"
    assert "nnodes: 2  # from environment variable PET_NNODES" in lines
    assert "node_rank: 1  # from environment variable PET_NODE_RANK" in lines
    assert "master_addr: grpo-node-0-0.grpo  # from environment variable PET_MASTER_ADDR" in lines
    assert "nproc_per_node: 1  # from command line" in lines
    assert yaml.safe_load(result.stdout)["nnodes"] == 2


def test_a_contradiction_is_one_line_and_exit_2_in_a_real_process():
    env = {**ENV, "NNODES": "2", "SLURM_NODEID": "0", "SLURM_NNODES": "3"}
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", "sft", "--print-config"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == "error: SLURM_NNODES=3 and NNODES=2 disagree on nnodes; unset one of them, or pass " \
                            "--nnodes\n"


def test_a_bad_rank_names_its_variable(tiny):
    result = in_process("train", "--model", tiny["model"], "--data", tiny["data"], "--print-config",
                        env={**ENV, "SLURM_NODEID": "3", "SLURM_NNODES": "2"})
    assert result.returncode == 2
    assert "environment variable SLURM_NODEID: key 'node_rank': 3 is not below nnodes 2" in result.stderr
