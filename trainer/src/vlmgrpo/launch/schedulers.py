"""Where a multi-host launch comes from when no flag says: the variables each scheduler hands its pods or tasks.

Pure logic over a mapping of environment variables (no torch, no os.environ of its own), so each scheduler's exact
environment is a unit test. Every value keeps the name of the variable it came from, for `--print-config` and for the
one line that names both sides when two schedulers' variables disagree.

What each scheduler sets, and where that is written:

- Kubeflow Trainer v2 (`TrainJob` on a `ClusterTrainingRuntime` with `mlPolicy.torch`): `PET_NNODES`,
  `PET_NPROC_PER_NODE` (a number, or `auto`, `cpu`, `gpu`), `PET_NODE_RANK` (the Job's completion index),
  `PET_MASTER_ADDR` (`<trainjob>-node-0-0.<trainjob>`), `PET_MASTER_PORT`: kubeflow/trainer
  pkg/runtime/framework/plugins/torch/torch.go `EnforceMLPolicy` (commit 85eed65a85b7afd0a7b0d00713d9d49f29f00c75),
  the names in pkg/constants/constants.go (commit a71a4b2b0e95402013caa09e85b981bbcdb53d29, port 29500).
- Kubeflow training operator v1 `PyTorchJob`: `MASTER_ADDR` (`<job>-master-0`), `MASTER_PORT` (the Master's
  `pytorchjob-port`), `WORLD_SIZE` (the number of pods: the replicas of every type added up) and `RANK` (0 for the
  Master, 1 + the index for a Worker): kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go `setPodEnv` and
  master.go (commits 5fa872ff10ed31b3996e0135602c991a4610a4a2, 2c099d5d6a549a66009a1ac5f18930ffae7e0da9).
- Slurm (`srun`, one task per node): `SLURM_NNODES` / `SLURM_STEP_NUM_NODES`, `SLURM_NODEID` (the node's index
  in the step), `SLURM_STEP_NODELIST` / `SLURM_JOB_NODELIST` (compressed, `node[01-03,07]`: the first host is the
  master, as `scontrol show hostnames | head -1`), `SLURM_PROCID`, `SLURM_NTASKS` / `SLURM_STEP_NUM_TASKS`: srun(1)
  and sbatch(1), OUTPUT ENVIRONMENT VARIABLES (read in SchedMD/slurm doc/man/man1/srun.1 at commit
  3bf22c447ad1dd9d77c63b5dbda4c3b38ed00d7a). Slurm sets no port: `MASTER_PORT`, else 29500.
- torchrun's own workers (`LOCAL_RANK`, `TORCHELASTIC_RUN_ID`, `GROUP_RANK`, `GROUP_WORLD_SIZE`,
  `LOCAL_WORLD_SIZE`): already launched, never launched again.
- Plain variables, for `docker run -e` and scripts: `NNODES`, `NODE_RANK`, `MASTER_ADDR`, `MASTER_PORT`,
  `NPROC_PER_NODE`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional

from vlmgrpo.errors import LaunchError

KEYS = ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port")
PLAIN = {"nproc_per_node": "NPROC_PER_NODE", "nnodes": "NNODES", "node_rank": "NODE_RANK",
         "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
TRAINER_V2 = {key: f"PET_{name}" for key, name in PLAIN.items()}
TRAINER_V2_NAME, PYTORCHJOB_NAME, SLURM_NAME, WORKER_NAME = "Kubeflow Trainer v2", "PyTorchJob", "Slurm", \
    "torchrun worker"


@dataclass
class Launch:
    """The launcher found, and key -> (value, the variables it came from)."""

    launcher: str
    values: dict[str, tuple[object, str]] = field(default_factory=dict)

    def worker(self) -> bool:
        return self.launcher == WORKER_NAME


def under_torchrun(environ: Mapping[str, str]) -> bool:
    return "TORCHELASTIC_RUN_ID" in environ or "LOCAL_RANK" in environ


def whole_number(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise LaunchError(f"{name}={text!r}: not a whole number") from None


def first_value(environ: Mapping[str, str], *names: str) -> Optional[tuple[str, str]]:
    """(name, value) of the first of names that is set."""
    return next(((name, environ[name]) for name in names if environ.get(name, "").strip()), None)


def plain(environ: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    found: dict[str, tuple[object, str]] = {}
    for key, name in PLAIN.items():
        if environ.get(name, "").strip():
            value = environ[name].strip()
            found[key] = (value if key == "master_addr" else whole_number(name, value), name)
    return found


def processes_per_node(name: str, text: str, gpu_count: Callable[[], int]) -> tuple[int, str]:
    """Trainer v2's numProcPerNode: a number, or torchrun's `gpu` (every visible GPU), `cpu` (every CPU) and `auto`
    (every visible GPU; one process where there is none, not torchrun's one per CPU, which no VLM trains with)."""
    word = text.strip().lower()
    if word not in ("auto", "gpu", "cpu"):
        return whole_number(name, text), name
    if word == "cpu":
        return os.cpu_count() or 1, f"{name}=cpu"
    gpus = gpu_count()
    if word == "gpu" and not gpus:
        raise LaunchError(f"{name}=gpu: no GPU is visible here; give the pod GPUs, or set numProcPerNode to a number")
    return max(gpus, 1), f"{name}={word} ({gpus} GPUs visible)"


def trainer_v2(environ: Mapping[str, str], gpu_count: Callable[[], int]) -> dict[str, tuple[object, str]]:
    found: dict[str, tuple[object, str]] = {}
    for key, name in TRAINER_V2.items():
        text = environ.get(name, "").strip()
        if not text:
            continue
        if key == "nnodes" and ":" in text:
            raise LaunchError(f"{name}={text}: elastic node ranges are not supported; give the job a fixed numNodes")
        if key == "nproc_per_node":
            found[key] = processes_per_node(name, text, gpu_count)
        else:
            found[key] = (text if key == "master_addr" else whole_number(name, text), name)
    return found


def pytorchjob(environ: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    """The pods as hosts: WORLD_SIZE counts pods and RANK is this pod's index (the training operator's meaning;
    torchrun gives the same names per process, which is why a torchrun worker is recognised first)."""
    if not (environ.get("WORLD_SIZE", "").strip() and environ.get("RANK", "").strip()):
        return {}
    return {"nnodes": (whole_number("WORLD_SIZE", environ["WORLD_SIZE"]), "WORLD_SIZE"),
            "node_rank": (whole_number("RANK", environ["RANK"]), "RANK")}


def slurm(environ: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    if not environ.get("SLURM_NODEID", "").strip():
        return {}
    found: dict[str, tuple[object, str]] = {
        "node_rank": (whole_number("SLURM_NODEID", environ["SLURM_NODEID"]), "SLURM_NODEID")}
    nodes = first_value(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    if nodes:
        found["nnodes"] = (whole_number(*nodes), nodes[0])
    nodelist = first_value(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if nodelist:
        found["master_addr"] = (first_host(nodelist[1]), f"{nodelist[0]} (first of {nodelist[1]})")
    tasks = first_value(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if tasks and nodes and whole_number(*tasks) != found["nnodes"][0]:
        raise LaunchError(
            f"Slurm started {tasks[1]} tasks on {nodes[1]} nodes ({tasks[0]}, {nodes[0]}): start one task per node "
            "(srun --ntasks-per-node=1); vlmgrpo starts each node's processes itself (--nproc-per-node)")
    procid = environ.get("SLURM_PROCID", "").strip()
    if procid and whole_number("SLURM_PROCID", procid) != found["node_rank"][0]:
        raise LaunchError(f"SLURM_PROCID={procid} and SLURM_NODEID={environ['SLURM_NODEID']} differ: start one task "
                          "per node (srun --ntasks-per-node=1)")
    return found


def worker(environ: Mapping[str, str]) -> dict[str, tuple[object, str]]:
    """What torchrun told this worker: its numbers, never another launch."""
    names = {"nnodes": "GROUP_WORLD_SIZE", "node_rank": "GROUP_RANK", "nproc_per_node": "LOCAL_WORLD_SIZE",
             "master_addr": "MASTER_ADDR", "master_port": "MASTER_PORT"}
    return {key: (environ[name] if key == "master_addr" else whole_number(name, environ[name]), name)
            for key, name in names.items() if environ.get(name, "").strip()}


def variable(source: str) -> str:
    """`PET_NPROC_PER_NODE=auto (2 GPUs visible)` -> `PET_NPROC_PER_NODE`."""
    return re.split(r"[ =]", source, maxsplit=1)[0]


def discover(environ: Mapping[str, str], given: Iterable[str] = (),
             gpu_count: Callable[[], int] = lambda: 0) -> Launch:
    """The launch the environment describes, for the keys no flag gave (`given`). Two variables that set one key to
    different values are a LaunchError naming both."""
    if under_torchrun(environ):
        return Launch(WORKER_NAME, {k: v for k, v in worker(environ).items() if k not in given})
    sources = [(TRAINER_V2_NAME, trainer_v2(environ, gpu_count)), (PYTORCHJOB_NAME, pytorchjob(environ)),
               (SLURM_NAME, slurm(environ)), ("", plain(environ))]
    values: dict[str, tuple[object, str]] = {}
    for _, found in sources:
        for key, (value, source) in found.items():
            if key in given:
                continue
            if key in values and values[key][0] != value:
                raise LaunchError(
                    f"{variable(values[key][1])}={values[key][0]} and {variable(source)}={value} disagree on {key}; "
                    f"unset one of them, or pass --{key.replace('_', '-')}")
            values[key] = (value, f"{values[key][1]} = {source}") if key in values else (value, source)
    launchers = [name for name, found in sources[:3] if any(key not in given for key in found)]
    return Launch(" and ".join(launchers) or ("environment" if values else "none (one host)"), values)


# --- Slurm's compressed host lists ------------------------------------------------------------------------------------

_BRACKETS = re.compile(r"\[([^\]]*)\]")


def split_nodelist(text: str) -> list[str]:
    """`a[1-2],b3` -> [`a[1-2]`, `b3`]: commas inside brackets separate ranges, outside them hosts."""
    parts, depth, current = [], 0, ""
    for character in text.strip():
        depth += {"[": 1, "]": -1}.get(character, 0)
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += character
    return [part for part in [*parts, current] if part]


def expand_range(text: str) -> list[str]:
    """`01-03,07` -> 01 02 03 07, keeping the zero padding of the lower bound."""
    numbers = []
    for item in text.split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise LaunchError(f"cannot read the Slurm host list range [{text}]")
        numbers += [str(n).zfill(len(low)) for n in range(int(low), int(high or low) + 1)]
    return numbers


def expand_nodelist(text: str) -> list[str]:
    """Every host of a compressed list, in order, as `scontrol show hostnames` prints them (several bracket groups
    in one name multiply: `r[1-2]n[1-2]` -> r1n1 r1n2 r2n1 r2n2)."""
    hosts = []
    for part in split_nodelist(text):
        names = [""]
        position = 0
        for match in _BRACKETS.finditer(part):
            prefix = part[position:match.start()]
            names = [name + prefix + number for name in names for number in expand_range(match.group(1))]
            position = match.end()
        hosts += [name + part[position:] for name in names]
    return hosts


def first_host(text: str) -> str:
    hosts = expand_nodelist(text)
    if not hosts:
        raise LaunchError(f"the Slurm host list {text!r} names no host")
    return hosts[0]
