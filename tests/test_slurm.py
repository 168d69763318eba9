"""Slurm, real: Debian's slurm-wlm and munge in containers of an image built FROM the image under test (one
slurmctld, two slurmd nodes on a user-defined network, a shared directory at /shared on all three;
testbed/slurm.py). `sbatch examples/launch/slurm/train.sbatch` trains one job over gloo on both nodes;
`scancel --signal=TERM` leaves one checkpoint and ends it; `scontrol requeue` of the ended job continues it at the
next step; `scontrol requeue` of the running job (preemption's way: SIGTERM to every process of the job, srun's
too, and SIGKILL after KillWait) leaves one more checkpoint before KillWait runs out and starts the job again, which
continues at the step after it; a time limit with `--signal=TERM@120` leaves one more checkpoint and ends it
again. Each stop: both nodes' vlmgrpo stop on SIGTERM, one new checkpoint with both ranks' RNG state."""

from __future__ import annotations

import json
import re
import uuid
from typing import Callable

import pytest

from tests.docker_env import TEST_REPOSITORY, docker_cli
from testbed.slurm import (CONFIG, ENDED, EXAMPLES, JOB_USER, JOBS, SlurmCluster, build_image, checkpoints,
                                 steps)

# Runs the cpu image the other session built: .ci/test runs it last in the session beside the main engine's
# build tests (tests/conftest.py).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.beside]
WARNING_S = 120  # --signal=TERM@120: the warning the test's time limit gives


@pytest.fixture(scope="module")
def slurm_image(image_under_test):
    tag = f"{TEST_REPOSITORY}/slurm:{uuid.uuid4().hex[:10]}"
    build_image(image_under_test["ref"], tag)
    yield tag
    docker_cli("rmi", tag, check=False)  # the build cache keeps the layer (16 MB) for the next run


@pytest.fixture(scope="module")
def cluster(slurm_image, tmp_path_factory):
    cluster = SlurmCluster(slurm_image, tmp_path_factory.mktemp("slurm-shared"))
    try:
        cluster.start()
        cluster.prepare_training()
        yield cluster
    finally:
        cluster.stop()


def test_srun_gives_vlmgrpo_the_step_nodes_and_its_rank(cluster):
    result = cluster.exec("srun", "--nodes=2", "--ntasks-per-node=1", "--label", "vlmgrpo", "train", "--config",
                          CONFIG, "--print-config", user=JOB_USER, timeout=600)
    lines = result.stdout.splitlines()
    for rank in (0, 1):
        expected = [f"{rank}: # launcher: Slurm",
                    f"{rank}: nnodes: 2  # from environment variable SLURM_STEP_NUM_NODES",
                    f"{rank}: node_rank: {rank}  # from environment variable SLURM_NODEID",
                    f"{rank}: master_addr: node1  # from environment variable SLURM_STEP_NODELIST (first of node[1-2])"]
        assert set(expected) <= set(lines), result.stdout[-3000:] + result.stderr[-3000:]


STOPPED = "stopped by SIGTERM: the workers wrote a checkpoint"  # each node's vlmgrpo, before it exits 143


def stop_and_check(cluster: SlurmCluster, job: str, output, stop: Callable[[], object],
                   until: set[str] = ENDED) -> int:
    """Calls stop, waits for the job to reach a state in until (its processes gone on both nodes); asserts that
    each node's vlmgrpo stopped on SIGTERM after the ranks wrote exactly one checkpoint holding both ranks' state;
    the checkpoint's step."""
    before, stops = checkpoints(output), cluster.job_log(job).count(STOPPED)
    stop()
    fields = cluster.wait_for_job(job, until, timeout=300)
    evidence = cluster.evidence(job)
    if until == ENDED:
        assert fields["ExitCode"] == "143:0", evidence  # srun's status, the script's last command
    assert cluster.job_log(job).count(STOPPED) == stops + 2, evidence
    new = checkpoints(output) - before
    assert len(new) == 1, (sorted(new), evidence)
    checkpoint = output / new.pop()
    assert {p.name for p in checkpoint.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}, evidence
    step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    assert steps(output) == list(range(1, step + 1)), evidence
    return step


def check_resumed(cluster: SlurmCluster, job: str, output, step: int, restarts: int) -> None:
    """Waits for the step after `step`; asserts that this start of the script (restart `restarts`) restored the
    checkpoint of `step` and went on from there."""
    cluster.wait_for_step(job, output, step + 1)
    assert cluster.job(job)["Restarts"] == str(restarts), cluster.evidence(job)
    log = cluster.job_log(job)
    assert re.search(rf"restored \d+ weight tensors from {JOBS}/run/checkpoint-{step}$", log, re.MULTILINE), \
        cluster.evidence(job)
    assert re.search(rf"^step {step + 1}/500 ", log, re.MULTILINE), cluster.evidence(job)


def shorten_time_limit(cluster: SlurmCluster, job: str) -> None:
    """A time limit about 1-2 minutes away, within the --signal warning: slurmctld's next time-limit pass (every
    30 s) signals the steps, as it would WARNING_S seconds before any time limit. A user may lower a limit."""
    hours, minutes, seconds = map(int, cluster.job(job)["RunTime"].split(":"))  # under a day here
    limit = hours * 60 + minutes + 2
    assert limit * 60 - (hours * 3600 + minutes * 60 + seconds) < WARNING_S
    cluster.exec("scontrol", "update", f"JobId={job}", f"TimeLimit={limit}", user=JOB_USER)


def test_one_job_on_two_nodes_stops_with_a_checkpoint_and_resumes_after_requeue(cluster):
    output = cluster.host_path(f"{JOBS}/run")
    job = cluster.sbatch(f"{EXAMPLES}/train.sbatch", "--max-steps", "500", "--save-steps", "1000", "--batch-size", "2",
                         options=(f"--signal=TERM@{WARNING_S}",),
                         env={"CONFIG": CONFIG, "OUT": f"{JOBS}/run", "GPUS_PER_NODE": "1"})
    cluster.wait_for_step(job, output, 1)
    log = cluster.job_log(job)
    assert cluster.job(job)["NodeList"] == "node[1-2]", cluster.evidence(job)
    for rank in (0, 1):  # each node's vlmgrpo started torchrun as one node of two, rank 0's host the master
        assert f"--nnodes=2 --node-rank={rank} --master-addr=node1" in log, cluster.evidence(job)

    first = stop_and_check(cluster, job, output,
                           lambda: cluster.exec("scancel", "--signal=TERM", job, user=JOB_USER))

    cluster.exec("scontrol", "requeue", job, user=JOB_USER)  # the ended job, from the top of its script
    check_resumed(cluster, job, output, first, restarts=1)

    # The running job, as preemption with PreemptMode=REQUEUE does it: every process of the job gets SIGTERM, then
    # SIGKILL after KillWait. PENDING once they are gone on both nodes (COMPLETING until then), then RUNNING again.
    second = stop_and_check(cluster, job, output, lambda: cluster.exec("scontrol", "requeue", job, user=JOB_USER),
                            until={"PENDING", "RUNNING"})
    assert second > first
    check_resumed(cluster, job, output, second, restarts=2)

    shorten_time_limit(cluster, job)
    third = stop_and_check(cluster, job, output, lambda: shorten_time_limit(cluster, job))
    assert third > second
