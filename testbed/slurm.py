"""A real Slurm test cluster in containers: Debian's own `slurm-wlm` and `munge` in an image built FROM the
training image, one `slurmctld` and two `slurmd` nodes on a user-defined Docker network, and one host directory
mounted at /shared in every container as the cluster's shared file system.

The nodes are the training image's containers, so the plain `srun vlmgrpo train` form of
examples/launch/slurm/ runs on them as it runs on bare-metal nodes with the trainer installed. No pytest in
here: bench/slurm.py starts the same cluster to time it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import yaml

SHARED = "/shared"  # the shared file system, at the same path on every node (data, model, output, config)
NODES = ("node1", "node2")
CONTROLLER = "slurmctl"
JOB_USER, JOB_UID = "trainer", 1000  # the image's user: jobs run as a user, as on a real cluster, not as root
JOBS = f"{SHARED}/jobs"  # the job user's directory: jobs are submitted from here and write their logs here
CONFIG = f"{SHARED}/data/rec_tiny.yaml"  # the tiny REC recipe, its model and data under /shared/data
EXAMPLES = f"{SHARED}/examples"  # examples/launch/slurm/, as a user copies it to the cluster
REPO = Path(__file__).resolve().parent.parent
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# Debian's packages, no recommends: the daemons, the client commands (sbatch, srun, scontrol) and munge. The
# base layer keeps apt's downloads (for its BuildKit cache mounts), so they are removed here in the same step.
DOCKERFILE = """\
FROM {base}
USER root
RUN apt-get update \\
    && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge \\
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
# The daemons run as given (the cluster's start script), not through the trainer's entrypoint.
ENTRYPOINT []
"""
# Each container's first command. munged runs as its own user and refuses a key others can read, so the
# shared key is copied in with munge's owner and mode 0400; /run/munge is not in the image (on a host,
# systemd's tmpfiles make it). Every node and client reads the one slurm.conf on the shared file system.
START = """\
#!/bin/sh
set -e
install -o munge -g munge -m 0400 {shared}/etc/munge.key /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
runuser -u munge -- /usr/sbin/munged
ln -sf {shared}/etc/slurm.conf /etc/slurm/slurm.conf
mkdir -p /var/spool/slurmctld /var/spool/slurmd
exec "$@"
"""
# No cgroups in a container here (no systemd, no delegated hierarchy): processes are tracked through their
# parent ids (proctrack/linuxproc) and tasks are not bound (task/none). KillWait: a requeue of a running job (as
# preemption's REQUEUE mode does it), a plain scancel and the time limit itself send every process of the job
# SIGTERM, srun in the batch script too, and SIGKILL KillWait seconds later (30 by default). srun takes SIGTERM as
# an order to kill the step, which slurmctld refuses for a job no longer RUNNING, and waits KillWait + 2 s for the
# tasks. So KillWait is the time the ranks have to finish their step and write the checkpoint: 7-9 s here
# (requeue to the processes gone), longer on a busier machine or with a bigger model; 60 s leaves room, and costs
# nothing when they exit sooner. cred_expire is how long a requeued job waits before it may start again (120 s by
# default); the scheduler's loops run every 5 s instead of 60 and 30, so that a requeued job starts once it may
# rather than at the next minute. Nodes check in with this host's CPUs.
SLURM_CONF = """\
ClusterName=imagegen-test
SlurmctldHost={controller}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
PropagateResourceLimits=NONE
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
KillWait=60
MinJobAge=600
NodeName=node[1-{count}] CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class SlurmError(RuntimeError):
    pass


def docker(*args: str, timeout: int = 300, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and result.returncode:
        raise SlurmError(f"docker {' '.join(args[:3])} ... failed ({result.returncode}): "
                         f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


def build_image(base: str, tag: str) -> float:
    """The Slurm image FROM `base` (a local tag), with BuildKit through the docker CLI imagegen itself chooses
    (the docker on PATH may lack buildx); its build time in s. Debian's archive is plain http here, so apt needs
    neither the proxy's CA nor a secret."""
    from imagegen.engine.buildkit import find_build_client

    client = find_build_client()
    started = time.monotonic()
    command = [*client.command, "--label", "io.imagegen.test=slurm", "-t", tag, "-"]
    result = subprocess.run(command, input=DOCKERFILE.format(base=base), capture_output=True, text=True,
                            env={**os.environ, **client.env}, timeout=900)
    if result.returncode:
        raise SlurmError(f"building the Slurm image failed: {result.stdout[-2000:]}{result.stderr[-3000:]}")
    return time.monotonic() - started


class SlurmCluster:
    """One controller and two nodes; `shared` (a host directory) is /shared in each."""

    def __init__(self, image: str, shared: Path):
        self.image, self.shared = image, shared
        stem = f"imagegen-slurm-{uuid.uuid4().hex[:8]}"
        self.network = stem
        self.containers = {name: f"{stem}-{name}" for name in (CONTROLLER, *NODES)}

    def write_config(self) -> None:
        self.shared.chmod(0o755)  # pytest makes its directories 0700: the job user must reach slurm.conf and data
        etc = self.shared / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "munge.key").write_bytes(secrets.token_bytes(1024))
        (etc / "munge.key").chmod(0o600)  # read by root in each container's start script only
        (etc / "slurm.conf").write_text(SLURM_CONF.format(controller=CONTROLLER, count=len(NODES),
                                                          cpus=os.cpu_count() or 1))
        (etc / "start.sh").write_text(START.format(shared=SHARED))
        (etc / "start.sh").chmod(0o755)
        jobs = self.shared / "jobs"
        jobs.mkdir(exist_ok=True)
        os.chown(jobs, JOB_UID, JOB_UID)

    def start(self, timeout: float = 120) -> None:
        """The network, the controller, the nodes; returns once every node is idle."""
        self.write_config()
        docker("network", "create", self.network)
        for host, container in self.containers.items():
            daemon = ["slurmctld", "-D"] if host == CONTROLLER else ["slurmd", "-D"]
            # The hostname is the node's name (slurmd finds its NodeName from it); the alias lets the others
            # resolve it through Docker's DNS on this network.
            docker("run", "-d", "--name", container, "--hostname", host, "--network", self.network,
                   "--network-alias", host, "-v", f"{self.shared}:{SHARED}", "--shm-size", "1g",
                   self.image, f"{SHARED}/etc/start.sh", *daemon)
        self.wait_until_idle(timeout)

    def wait_until_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        states = ""
        while time.monotonic() < deadline:
            result = self.exec("sinfo", "--noheader", "--Node", "--format=%N %t", check=False)
            states = result.stdout.strip()
            if result.returncode == 0 and sorted(states.splitlines()) == [f"{node} idle" for node in NODES]:
                return
            time.sleep(1)
        raise SlurmError(f"the nodes are not idle after {timeout:.0f} s (sinfo: {states!r})\n{self.logs()}")

    def exec(self, *command: str, host: str = CONTROLLER, user: str | None = None, check: bool = True,
             timeout: int = 120) -> subprocess.CompletedProcess:
        """A command in one of the cluster's containers (the controller by default), as user (default root)."""
        return docker("exec", *(["--user", user] if user else []), "--workdir", JOBS, self.containers[host],
                      *command, check=check, timeout=timeout)

    def sbatch(self, script: str, *arguments: str, options: tuple[str, ...] = (),
               env: dict[str, str] | None = None) -> str:
        """Submits script (a path under /shared) as the job user; the job's id. env is exported to the job."""
        exports = [f"{key}={value}" for key, value in (env or {}).items()]
        result = self.exec("env", *exports, "sbatch", "--parsable", *options, script, *arguments, user=JOB_USER)
        return result.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job`'s fields (JobState, Restarts, ExitCode, NodeList, ...)."""
        text = self.exec("scontrol", "show", "job", "--oneliner", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_for_job(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.5)
        raise SlurmError(f"job {job_id} is not in {sorted(states)} after {timeout:.0f} s: {fields}\n{self.logs()}")

    def logs(self) -> str:
        """Each daemon's log (they log to stderr under -D), for a failure's message."""
        parts = []
        for host, container in self.containers.items():
            result = docker("logs", "--tail", "60", container, check=False)
            parts.append(f"--- {host} ---\n{result.stdout}{result.stderr}")
        return "\n".join(parts)

    def stop(self) -> None:
        for container in self.containers.values():
            docker("rm", "-f", container, check=False)
        docker("network", "rm", self.network, check=False)

    def prepare_training(self) -> None:
        """The tiny model and grounding set (made by the image's own vlmgrpo), the REC recipe pointing at them, and
        the example sbatch scripts, on the shared file system."""
        self.exec("vlmgrpo", "make-tiny", "--out", f"{SHARED}/data/tiny", timeout=600)
        recipe = yaml.safe_load((REPO / "examples" / "rec_tiny.yaml").read_text())
        recipe.update(model_name_or_path=f"{SHARED}/data/tiny/model", output_dir=f"{JOBS}/run",
                      data=[{**recipe["data"][0], "path": f"{SHARED}/data/tiny/data/rec.jsonl",
                             "image_root": f"{SHARED}/data/tiny/data/images"}])
        (self.shared / "data" / "rec_tiny.yaml").write_text(yaml.safe_dump(recipe))
        self.exec("chmod", "-R", "a+rX", f"{SHARED}/data")
        shutil.copytree(REPO / "examples" / "launch" / "slurm", self.shared / "examples")

    def host_path(self, path: str) -> Path:
        """The host's path of a path under /shared."""
        return self.shared / Path(path).relative_to(SHARED)

    def job_log(self, job_id: str) -> str:
        path = self.shared / "jobs" / f"vlmgrpo-{job_id}.out"  # the example's --output, in the submit directory
        return path.read_text(errors="replace") if path.exists() else "(no job output yet)"

    def evidence(self, job_id: str) -> str:
        """What a failure shows: the job, its output's tail and the daemons' logs."""
        fields = self.job(job_id)
        return f"job {job_id}: {fields}\n--- job output ---\n{self.job_log(job_id)[-6000:]}\n{self.logs()}"

    def wait_for_step(self, job_id: str, output: Path, step: int, timeout: float = 600) -> float:
        """Waits until output/metrics.jsonl has `step`; the seconds it took. Fails at once if the job ends."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if step in steps(output):
                return time.monotonic() - started
            if self.job(job_id).get("JobState") in ENDED:
                raise SlurmError(f"job {job_id} ended before step {step}\n{self.evidence(job_id)}")
            time.sleep(0.25)
        raise SlurmError(f"no step {step} after {timeout:.0f} s\n{self.evidence(job_id)}")


def steps(output: Path) -> list[int]:
    """The steps of a run's metrics.jsonl, in order."""
    path = output / "metrics.jsonl"
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            found.append(json.loads(line)["step"])
        except ValueError:
            pass  # the line rank 0 is writing now
    return found


def checkpoints(output: Path) -> set[str]:
    return {path.name for path in output.glob("checkpoint-*")}
