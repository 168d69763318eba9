"""Section 9: Slurm on the test cluster (testbed/slurm.py: Debian's slurm-wlm, one slurmctld and two slurmd
nodes in containers of the cpu image): from `sbatch` to the first finished step of one job on both nodes, and from
`scontrol requeue` to the first step after the checkpoint, one run each."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from testbed.slurm import CONFIG, ENDED, EXAMPLES, JOB_USER, JOBS, SlurmCluster, build_image, checkpoints, steps

from .common import docker, table
from .cpu_image import build_cpu


def timed(action) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def until_running(cluster: SlurmCluster, job: str, started: float) -> float:
    """Seconds from `started` until slurmctld has started the job (its batch script runs on the first node)."""
    cluster.wait_for_job(job, {"RUNNING"} | ENDED, timeout=600)
    return time.monotonic() - started


def job_times(cluster: SlurmCluster) -> list[tuple[str, str]]:
    """The job's rows: sbatch to step 1, scancel --signal=TERM to the job's end, requeue to the next step; each with
    the part Slurm took to start the job (the rest is the trainer's start on both nodes: Python, torchrun, gloo,
    the model)."""
    output = cluster.host_path(f"{JOBS}/run")
    started = time.monotonic()
    job = cluster.sbatch(f"{EXAMPLES}/train.sbatch", "--max-steps", "500", "--save-steps", "1000", "--batch-size",
                         "2", env={"CONFIG": CONFIG, "OUT": f"{JOBS}/run", "GPUS_PER_NODE": "1"})
    running_s = until_running(cluster, job, started)
    cluster.wait_for_step(job, output, 1)
    first_s = time.monotonic() - started
    cluster.wait_for_step(job, output, 6)
    stop_s = timed(lambda: (cluster.exec("scancel", "--signal=TERM", job, user=JOB_USER),
                            cluster.wait_for_job(job, ENDED, timeout=300)))
    (checkpoint,) = checkpoints(output)
    saved = int(checkpoint.split("-")[1])
    started = time.monotonic()
    cluster.exec("scontrol", "requeue", job, user=JOB_USER)
    requeued_running_s = until_running(cluster, job, started)
    cluster.wait_for_step(job, output, saved + 1)
    requeue_s = time.monotonic() - started
    cluster.exec("scancel", job, user=JOB_USER)
    assert steps(output)[:saved + 1] == list(range(1, saved + 2))
    return [("`sbatch train.sbatch` to the first finished step (both nodes, gloo)",
             f"{first_s:.0f} (running after {running_s:.0f})"),
            (f"`scancel --signal=TERM` at step {saved} to the job's end (checkpoint-{saved} written)", f"{stop_s:.0f}"),
            (f"`scontrol requeue` of the ended job to step {saved + 1} (resumed from checkpoint-{saved}; Slurm holds a "
             "requeued job for cred_expire, 10 s here)", f"{requeue_s:.0f} (running after {requeued_running_s:.0f})")]


def section(work: Path) -> str:
    cpu = build_cpu("cpu", work)
    tag = f"imagegen-bench/slurm:{uuid.uuid4().hex[:10]}"
    build_s = build_image(cpu.report["ref"], tag)
    shared = work / "shared"
    shared.mkdir()
    cluster = SlurmCluster(tag, shared)
    try:
        up_s = timed(cluster.start)
        cluster.prepare_training()
        rows = [("the Slurm image FROM the cpu image (apt: slurmctld, slurmd, slurm-client, munge; from BuildKit's "
                 "cache when the tests built it before)", f"{build_s:.0f}"),
                ("the cluster up: network, slurmctld, two slurmd, both nodes idle", f"{up_s:.0f}"),
                *job_times(cluster)]
    finally:
        cluster.stop()
        docker("rmi", tag)
    return "\n".join([
        "## 9. Slurm: from sbatch to the first step on the test cluster",
        "",
        "The cluster `tests/test_slurm.py` runs: Debian bookworm's slurm-wlm 22.05 and munge in an image FROM the cpu "
        "image, one slurmctld and two slurmd containers on one Docker network of this machine, `srun vlmgrpo train` "
        "(examples/launch/slurm/train.sbatch) training the tiny REC recipe as one job of two nodes with one CPU "
        "process each. Whole commands, one run; the two nodes share this machine's cores.",
        "",
        table(("what", "wall s"), rows),
        "",
        "The load average below includes whatever else this machine ran meanwhile: the trainer's start-up on the "
        "two nodes is CPU-bound, so a busy machine stretches the first step and the step after the requeue most.",
    ])
