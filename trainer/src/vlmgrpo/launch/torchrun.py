"""Multi-process launch through torchrun, and the checks that should fail before any GPU time is spent."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Optional

from vlmgrpo.config.sections import RunConfig
from vlmgrpo.errors import LaunchError

if TYPE_CHECKING:  # config.load imports TRL (seconds): `train` loads it after the launch is known
    from vlmgrpo.config.train_config import TrainConfig

log = logging.getLogger("vlmgrpo")

PRESETS = ("zero2", "zero3", "zero3_offload")
# A worker that stopped on a signal (its own or, through the all-reduce in GracefulStop, another host's) writes the
# signal number here, so that the launching process exits 128 + signal on every host, not torchrun's 1.
STOP_MARKER_VARIABLE = "VLMGRPO_STOP_MARKER"
MIN_SHM_BYTES = 1 << 30  # NCCL and dataloader workers need more than Docker's default 64 MB


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def restart_count() -> int:
    """How many times torchrun has restarted the workers (--max-restarts); 0 on the first attempt."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def world_size(run: RunConfig) -> int:
    if under_torchrun():
        return int(os.environ.get("WORLD_SIZE", "1"))
    return run.nproc_per_node * run.nnodes


def needs_launch(run: RunConfig) -> bool:
    return not under_torchrun() and (run.nproc_per_node > 1 or run.nnodes > 1 or run.max_restarts > 0)


def torchrun_environment(run: RunConfig) -> dict[str, str]:
    """torchrun kills workers 30 s after forwarding SIGTERM by default, too soon to finish a step and save.
    The variable (torch >= 2.9; older versions ignore it) gives them shutdown_timeout seconds instead."""
    environment = dict(os.environ)
    environment.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(run.shutdown_timeout))
    return environment


def torchrun_command(run: RunConfig, argv: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={run.nproc_per_node}",
        f"--nnodes={run.nnodes}",
        f"--node-rank={run.node_rank}",
        f"--master-addr={run.master_addr}",
        f"--master-port={run.master_port}",
        *([f"--max-restarts={run.max_restarts}"] if run.max_restarts else []),
        "-m", "vlmgrpo", *argv,
    ]


def worker_of(launcher_pid: int):
    """The first training worker under a `vlmgrpo` process that launched through torchrun_command: vlmgrpo ->
    torchrun (`-m torch.distributed.run ... -m vlmgrpo`) -> `-m vlmgrpo` workers. The one to kill to see a restart
    (not the launcher or torchrun), for the restart test and the bench; a psutil.Process. psutil is accelerate's
    dependency, and only these callers, from outside the run, need it."""
    import psutil

    for child in psutil.Process(launcher_pid).children(recursive=True):
        command = child.cmdline()
        if "vlmgrpo" in command and "torch.distributed.run" not in command:
            return child
    raise LookupError(f"no vlmgrpo worker under process {launcher_pid}")


def run_torchrun(run: RunConfig, argv: list[str]) -> int:
    """Run torchrun as a child and pass SIGTERM/SIGINT on, so a preempted run exits with 128 + signal like a
    single-process one (torchrun itself would exit 1 with a traceback) after the workers have checkpointed.
    A host whose workers stopped because another host was signalled exits the same way."""
    with tempfile.TemporaryDirectory(prefix="vlmgrpo-launch-") as work:
        marker = os.path.join(work, "stopped")
        environment = dict(torchrun_environment(run), **{STOP_MARKER_VARIABLE: marker})
        received: list[int] = []
        process: Optional[subprocess.Popen] = None

        def forward(signum, frame):
            received.append(signum)
            if process is not None:
                process.send_signal(signum)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, forward)
        process = subprocess.Popen(torchrun_command(run, argv), env=environment)
        if received:  # arrived while torchrun was starting
            process.send_signal(received[0])
        code = process.wait()
        stopped_by = received[0] if received else read_stop_marker(marker)
    if stopped_by is None:
        if code and run.max_restarts:
            log.error("a worker failed again after %d restart(s), the budget of --max-restarts %d: see the worker's "
                      "error above", run.max_restarts, run.max_restarts)
        return code
    cause = "" if received else " sent to another process of the run"
    log.warning("stopped by %s%s: the workers wrote a checkpoint at the end of their step (torchrun's traceback "
                "above is expected); continue with --resume auto", signal.Signals(stopped_by).name, cause)
    return 128 + stopped_by


def exit_on_signal_until_training() -> None:
    """SIGTERM or SIGINT before training starts: exit 128 + signal at once, with nothing to checkpoint yet.

    Without this a container's PID 1 (vlmgrpo, exec'd by the entrypoint) ignores SIGTERM while it checks the data
    or loads the model, and `docker stop` waits out its grace period to kill it. GracefulStop and run_torchrun
    replace this handler when they start."""

    def leave(signum, frame):
        log.warning("received %s before training started: nothing to checkpoint yet, exiting",
                    signal.Signals(signum).name)
        sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, leave)


def read_stop_marker(path: str) -> Optional[int]:
    try:
        return int(open(path).read())
    except (OSError, ValueError):
        return None


def write_stop_marker(signal_number: int) -> None:
    """Called by a worker that stopped on a signal; a no-op outside a launch."""
    path = os.environ.get(STOP_MARKER_VARIABLE)
    if path:
        with open(path, "w") as stream:
            stream.write(str(int(signal_number)))


@dataclass(frozen=True)
class LaunchPlan:
    world_size: int  # the run's processes: nproc_per_node x nnodes
    deepspeed: Any  # the DeepSpeed JSON's path (a preset's, shipped in the package); None without
    shm_hint: Optional[str]  # check_shm's: said before several local processes start
    through_torchrun: bool  # this process launches torchrun (needs_launch), which starts the workers
    # What the run needs of its devices, which no check before it can see (--dry-run says them): devices_needed
    devices: tuple[str, ...] = ()
    # GRPO's generation batch at this world size (generation_batch: completions, num_generations, how it is made)
    generation: Optional[tuple[int, int, str]] = None

    def check_rows(self, rows: int) -> None:
        """TRL's sampler hands out whole generation batches only (completions / num_generations distinct prompts):
        fewer training rows than one batch train 0 steps and would save the untrained model as the result."""
        if self.generation is None:
            return
        completions, generations, made = self.generation
        prompts = completions // generations
        if rows < prompts:
            raise LaunchError(
                f"{rows} training row(s) make no whole generation batch of {prompts} prompts ({completions} "
                f"completions: {made}, / num_generations {generations}): training would run 0 steps; add rows, or "
                "lower the batch size or gradient_accumulation_steps")


def plan_launch(config: TrainConfig) -> LaunchPlan:
    """The launch part of the run plan (training/plan.py): DeepSpeed's JSON read (a missing or broken one fails here,
    before any model) and its package present; the world size, and for GRPO whole groups of generations in its
    batches at that size; /dev/shm's hint."""
    deepspeed = resolve_deepspeed(config.trl.deepspeed)
    if deepspeed and importlib.util.find_spec("deepspeed") is None:
        raise LaunchError(f"deepspeed {config.trl.deepspeed} requested but the deepspeed package is not "
                          "installed; use an image with DeepSpeed or drop --deepspeed")
    processes, generation = world_size(config.run), None
    if getattr(config.trl, "num_generations", None):  # GRPO's config: its batches hold groups of completions
        generation = generation_batch(config, processes)
        check_batch(config, processes, generation)
    return LaunchPlan(processes, deepspeed, check_shm(config.run), needs_launch(config.run),
                      devices_needed(config, processes), generation)


def devices_needed(config: TrainConfig, processes: int) -> tuple[str, ...]:
    """What the run needs of its devices: the processes' GPUs, NCCL and rendezvous (the batch arithmetic was checked
    for that world size), and bf16, DeepSpeed's engine, vLLM and an attention kernel where the config asks for them."""
    run = config.run
    needed = [f"{processes} process(es) ({run.nproc_per_node} per node x {run.nnodes} nodes): batch arithmetic "
              "checked for that world size; its GPUs, NCCL and the rendezvous are not"]
    for key, what in (("bf16", "bf16 on the GPUs"), ("deepspeed", "DeepSpeed's engine (the file was read)"),
                      ("use_vllm", "vLLM on the GPUs")):
        if getattr(config.trl, key, None) not in (None, False, "auto"):  # sft has no use_vllm
            needed.append(what)
    if config.model.attn_implementation not in ("auto", "sdpa", "eager"):
        needed.append(f"attention {config.model.attn_implementation} on the GPUs")
    return tuple(needed)


def resolve_deepspeed(value: Any) -> Any:
    """A preset name becomes the path of the JSON shipped in the package; anything else is passed through."""
    if value in PRESETS:
        return str(resources.files("vlmgrpo").joinpath(f"presets/{value}.json"))
    if isinstance(value, str) and value and not os.path.isfile(value):
        raise LaunchError(f"--deepspeed {value}: neither a preset ({', '.join(PRESETS)}) nor an existing JSON file")
    if isinstance(value, str) and value:
        try:
            loaded = json.loads(open(value).read())
        except ValueError as exc:
            raise LaunchError(f"--deepspeed {value}: not valid JSON ({exc})") from None
        except RecursionError:  # nested deeper than Python's stack: json's own error, and no ValueError
            raise LaunchError(f"--deepspeed {value}: nested too deeply to be a DeepSpeed configuration") from None
        if not isinstance(loaded, dict):
            raise LaunchError(f"--deepspeed {value}: a DeepSpeed configuration is a JSON object, not "
                              f"{type(loaded).__name__}")
    return value


def generation_batch(config: TrainConfig, processes: int) -> tuple[int, int, str]:
    """(completions per generation batch, num_generations, how the batch is made) as TRL's GRPOConfig sizes it."""
    grpo = config.trl
    per_device = grpo.per_device_train_batch_size
    accumulation = grpo.gradient_accumulation_steps
    steps_per_generation = grpo.steps_per_generation or accumulation
    made = (f"per-device batch {per_device} x {processes} processes x {steps_per_generation} steps per generation"
            if not grpo.generation_batch_size else "generation_batch_size")
    return (grpo.generation_batch_size or per_device * processes * steps_per_generation,
            grpo.num_generations, made)


def check_batch(config: TrainConfig, processes: int, generation: tuple[int, int, str]) -> None:
    """TRL needs whole groups of num_generations completions in each generation batch (generation_batch's, at this
    world size)."""
    grpo = config.trl
    completions, generations, made = generation
    if completions % generations:
        raise LaunchError(
            f"global batch {completions} ({made}) is not divisible by num_generations {generations}; "
            f"change --batch-size, --num-generations or gradient_accumulation_steps"
        )
    # Held-out rows are evaluated unless eval_strategy says no (started.resolved_trl_values).
    if not config.data.val_split_ratio or (config.is_set("eval_strategy") and grpo.eval_strategy == "no"):
        return
    eval_batch = grpo.per_device_eval_batch_size * processes
    eval_generations = grpo.num_generations_eval or generations
    if eval_batch % eval_generations:
        raise LaunchError(
            f"evaluation batch {eval_batch} (per_device_eval_batch_size x {processes} processes) is not divisible "
            f"by {eval_generations} generations; set per_device_eval_batch_size or num_generations_eval"
        )


def shm_bytes(path: str = "/dev/shm") -> Optional[int]:
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


def check_shm(run: RunConfig) -> Optional[str]:
    """A hint (not an error) when /dev/shm is too small for several local processes."""
    if run.nproc_per_node <= 1:
        return None
    size = shm_bytes()
    if size is None or size >= MIN_SHM_BYTES:
        return None
    return (f"/dev/shm is only {size // (1 << 20)} MiB; multi-process training (NCCL, data loading) can crash "
            "or hang with that. Start the container with `docker run --shm-size=16g ...` or `--ipc=host`")
