"""The output directory a run writes, the owner of its part of the run plan (training/plan.py): apart from the model it
reads, no system directory, writable, and holding no earlier run unless told to continue it (the checkpoint to resume
from) or start over (what to clear); whose checkpoints the run writes (its identity). Each failure is one line: what
is wrong, where it was set, what to do."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from vlmgrpo.access import unwritable_directory
from vlmgrpo.errors import ConfigError
from vlmgrpo.training.checkpoint import RUN_OWN, earlier_run, resolve_resume, run_identity
from vlmgrpo.launch.torchrun import restart_count, under_torchrun

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig
    from vlmgrpo.models.source import ModelSource

# The operating system's own trees, and the top directories other things live in: never a run's output.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr")
SHARED_TOPS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var")


@dataclass(frozen=True)
class OutputPlan:
    directory: str  # output_dir
    identity: dict[str, Any]  # whose checkpoints this run writes and may resume (checkpoint.run_identity)
    resume: Optional[str]  # the checkpoint-N directory to continue from; None: from step 0
    # --overwrite-output: the earlier run's checkpoints and logs, which the launching process removes (clear_earlier_run)
    clear: tuple[str, ...] = ()


def plan_output(config: TrainConfig, model: ModelSource) -> OutputPlan:
    """The output directory apart from the model, no system directory and writable; what the run does with what it
    holds: it resumes --resume's checkpoint (after a restart the newest one), clears an earlier run with
    --overwrite-output, and refuses an earlier run or anyone's files otherwise."""
    output, where = config.trl.output_dir, config.where("output_dir")
    check_place(output, f"{where}: key 'output_dir'", {
        "the model (model_name_or_path)": model.base, "the adapter (adapter_name_or_path)": model.adapter})
    if config.run.resume and config.run.overwrite_output:
        raise ConfigError(f"{config.where('overwrite_output')}: --overwrite-output starts over and --resume "
                          f"{config.run.resume} continues: give one of them")
    identity = run_identity(config.command.name, model.base)
    # A --resume PATH that is no checkpoint, or another run's, fails here, before any weights.
    resume = resolve_resume(config.run.resume or ("auto" if restart_count() else None), output, identity)
    found = earlier_run(output)
    launcher = not under_torchrun()  # a torchrun worker's launcher has checked (and cleared) the output already
    if config.run.overwrite_output:
        cleared = tuple(found) if launcher and config.run.node_rank == 0 else ()
        return OutputPlan(output, identity, resume, cleared)
    if not launcher or config.run.resume:
        return OutputPlan(output, identity, resume)
    # Neither resuming nor starting over: no earlier run, and no one's files, to write over.
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(f"{where}: key 'output_dir': {output} already holds an earlier run ({shown}); continue it "
                          "with --resume auto, start over with --overwrite-output (removes its checkpoints and logs), "
                          "or choose another --output")
    others = [name for name in (sorted(os.listdir(output)) if os.path.isdir(output) else []) if name not in RUN_OWN]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ConfigError(f"{where}: key 'output_dir': {output} is not empty ({shown}) and holds no earlier run: the "
                          "run would write its model, config and logs over what is there; choose a new or empty "
                          "--output, or pass --overwrite-output to write into it anyway")
    return OutputPlan(output, identity, resume)


def check_place(output: str, where: str, sources: dict[str, Optional[str]]) -> None:
    """Apart from the model it reads, no system directory, writable."""
    check_output_apart(where, output, sources)
    system = system_directory(output)
    if system:
        raise ConfigError(f"{where}: {output} is {system}, which a run must not write into; choose a directory of its "
                          "own (a new one under your home, a volume, or the job's scratch)")
    problem = unwritable_directory(output)
    if problem:
        raise ConfigError(f"{where}: {problem}")


def check_output_apart(where: str, output: str, sources: dict[str, Optional[str]]) -> None:
    """The output is neither a directory a model is read from nor inside one: saving there rewrites the base model
    (or adapter) being trained or merged, in place, with exit 0. sources: how each is named -> its path or hub id."""
    target = os.path.realpath(os.path.expanduser(output))
    for name, source in sources.items():
        if not source or not os.path.isdir(os.path.expanduser(source)):
            continue  # a hub id: its files are in the cache, not a directory given here
        base = os.path.realpath(os.path.expanduser(source))
        if target == base or target.startswith(base + os.sep):
            place = "is" if target == base else "is inside"
            raise ConfigError(f"{where}: {output} {place} {name} {source}: saving there would overwrite the model "
                              "it is read from; choose an --output outside it")


def system_directory(output: str) -> Optional[str]:
    """What kind of system directory the output is (the file system's root, /etc, /usr/lib, ...), or None."""
    path = os.path.realpath(os.path.expanduser(output))
    if path in SHARED_TOPS:
        return "the file system's root" if path == "/" else f"the system directory {path}"
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + os.sep):
            return f"inside the system directory {tree}" if path != tree else f"the system directory {tree}"
    return None


def clear_earlier_run(output: OutputPlan, where: str) -> list[str]:
    """--overwrite-output: remove the earlier run's checkpoints and logs the plan found (once, by the launching
    process); WHERE says where overwrite_output was set."""
    removed = []
    for name in output.clear:
        path = os.path.join(output.directory, name)
        try:
            if os.path.islink(path):  # a checkpoint linked in from elsewhere: the link goes, what it points to stays
                name = f"{name} (a link; {os.readlink(path)} kept)"
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
            else:
                continue
        except OSError as error:
            raise ConfigError(f"{where}: --overwrite-output: cannot remove {path} "
                              f"({error.strerror or error}); remove it yourself, or choose another --output") from None
        removed.append(name)
    return removed
