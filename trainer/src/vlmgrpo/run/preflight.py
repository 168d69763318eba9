"""The checks that need no weights and every training command shares, run before any weights load (and by
`--dry-run`), and by `score` and `merge`; each command's own checks are its Recipe's validate (grpo.py, sft.py).

Each failure is one line saying what is wrong, where it was set, and what to do.
"""

from __future__ import annotations

import functools
import logging
import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import NamedTuple, Optional

from vlmgrpo.access import nearest_existing, unreadable, unreadable_in_tree, unwritable_directory
from vlmgrpo.boxes import ABSOLUTE
from vlmgrpo.run.checkpoint import checkpoint_dirs, resolve_resume, run_identity
from vlmgrpo.config.load import TrainConfig
from vlmgrpo.data.datasets import LoadedData, RowValidator, load_data
from vlmgrpo.errors import ConfigError, LaunchError
from vlmgrpo.run.launch import resolve_deepspeed, restart_count, under_torchrun
from vlmgrpo.data.rec import validate_row
from vlmgrpo.rewards.accuracy import DEFAULT_METHOD, LLM
from vlmgrpo.rewards import BOX_REWARDS, JSONL_ACCURACY, RewardFunc, check_reward_names

# Hub repository ids: "name" or "owner/name"; anything else is a local path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# What an earlier run leaves in its output directory besides checkpoints (see callbacks.py and grpo.py).
RUN_LOGS = ("metrics.jsonl", "completions.jsonl")


def _offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in
               ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


class Resolved(NamedTuple):
    """What check_run resolves, kept for the run (prepared.PreparedRun)."""

    deepspeed: Optional[str]  # the DeepSpeed JSON's path; None without DeepSpeed
    resume: Optional[str]  # the checkpoint to continue from; None: from step 0
    identity: dict  # checkpoint.run_identity


class Source(NamedTuple):
    """A kind of directory a key names, for the messages about it."""

    marker: str  # the file that makes a directory one
    noun: str
    what: str
    contents: str
    writer: str
    example: str  # a hub id


MODEL = Source("config.json", "model", "saved transformers model", "config.json, weights, processor files",
               "save_pretrained", "Qwen/Qwen2.5-VL-3B-Instruct")
ADAPTER = Source("adapter_config.json", "adapter", "saved PEFT adapter", "adapter_config.json, adapter weights",
                 "a run with use_peft (OUTPUT/adapter)", "your-org/your-adapter")


def check_source(where: str, value: str, source: Source) -> None:
    """A local directory must exist, hold the source's marker file and be readable by this uid; a hub id must be
    reachable (not offline) or cached."""
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        problems = [p for p in (unreadable(path),) if p] or [unreadable(p) for p in unreadable_in_tree(path)]
        if problems:
            more = f" ({len(problems) - 1} more like it: chmod -R a+rX {path})" if len(problems) > 1 else ""
            raise ConfigError(f"{where}: {problems[0]}{more}")
        if not os.path.isfile(os.path.join(path, source.marker)):
            raise ConfigError(f"{where}: {path} has no {source.marker}, so it is not a {source.what}; give the "
                              f"directory {source.writer} wrote ({source.contents})")
        return
    if os.path.exists(path):
        raise ConfigError(f"{where}: {path} is a file; give the {source.noun}'s directory")
    if not _HUB_ID.match(value):
        ancestor = nearest_existing(Path(path))
        reason = unreadable(str(ancestor)) or "no such directory"  # an ancestor this uid cannot enter hides it
        raise ConfigError(f"{where}: {value} does not exist ({reason}); give the directory of a saved {source.noun} "
                          f"({source.contents}) or a hub id such as {source.example}")
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(value, source.marker), str):
            raise ConfigError(f"{where}: {value} is neither a local directory nor a {source.noun} in the hub cache, "
                              f"and downloads are off (HF_HUB_OFFLINE=1); give the {source.noun}'s directory")


def resolve_adapter_base(model, where, origins: dict[str, str]) -> None:
    """An adapter to start from must be one; without model_name_or_path, its base model is the one it names. WHERE
    says where a key was set (TrainConfig.where); ORIGINS learns where the base model came from."""
    adapter = model.adapter_name_or_path
    if not adapter:
        return
    said = f"{where('adapter_name_or_path')}: key 'adapter_name_or_path'"
    check_source(said, adapter, ADAPTER)
    if model.model_name_or_path:
        return
    from peft import PeftConfig

    try:
        base = PeftConfig.from_pretrained(adapter).base_model_name_or_path
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"{said}: cannot read {adapter}'s adapter_config.json ({exc})") from None
    if not base:
        raise ConfigError(f"{said}: {adapter}'s adapter_config.json names no base model; pass --model BASE")
    model.model_name_or_path = base
    origins["model_name_or_path"] = f"{adapter}: adapter_config.json's base_model_name_or_path"


def check_model(model, where, origins: dict[str, str]) -> None:
    """The model section alone (`merge` has no more): the model (or the base model its adapter names) and the
    adapter exist and this uid can read them."""
    resolve_adapter_base(model, where, origins)
    value = model.model_name_or_path
    said = f"{where('model_name_or_path')}: key 'model_name_or_path'"
    if not value:
        raise ConfigError(f"{said} is not set (or pass --model PATH)")
    check_source(said, value, MODEL)


def check_model_source(config: TrainConfig) -> None:
    """The model (or the base model an adapter names) and the adapter exist and this uid can read them."""
    check_model(config.model, config.where, config.origins)


def check_model_kind(config: TrainConfig, vision: bool) -> None:
    """What needs the model's config (read, no weights): LoRA targets that exist in its language model."""
    from vlmgrpo.models.loading import unmatched_lora_targets

    if not config.model.use_peft or config.model.adapter_name_or_path:
        return
    linear = unmatched_lora_targets(config.model, vision)
    if linear:
        raise ConfigError(f"{config.where('lora_target_modules')}: key 'lora_target_modules': "
                          f"{', '.join(config.model.lora_target_modules)} match no layer of "
                          f"{config.model.model_name_or_path}'s language model; its linear layers are named "
                          f"{', '.join(linear)}")


def check_quantization(config: TrainConfig) -> None:
    """QLoRA: 4-bit (or 8-bit) weights under a LoRA adapter, which needs bitsandbytes and a CUDA GPU."""
    key = next((k for k in ("load_in_4bit", "load_in_8bit") if getattr(config.model, k)), None)
    if key is None:
        return
    from vlmgrpo.models.loading import cuda_available

    where = f"{config.where(key)}: key '{key}'"
    if not cuda_available():
        raise ConfigError(f"{where}: QLoRA needs an NVIDIA GPU (bitsandbytes' 4-bit layers run on CUDA only) and "
                          "none is visible here; run on a GPU host (docker run --gpus all with a CUDA image), or drop "
                          f"{key} to train LoRA on the full-precision model")
    if not config.model.use_peft:
        raise ConfigError(f"{where}: quantized weights cannot be trained themselves; QLoRA trains a LoRA adapter on "
                          "them: set use_peft: true")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ConfigError(f"{where}: QLoRA needs the bitsandbytes package, which is not installed here; pip install "
                          f"bitsandbytes, or drop {key}")


def check_reporting(config: TrainConfig) -> None:
    """report_to names transformers knows, each with its package installed (tensorboard is a vlmgrpo dependency)."""
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    value = config.trl.report_to
    names = [value] if isinstance(value, str) else list(value or [])
    available = get_available_reporting_integrations()
    for name in names:
        if name in ("none", "all", "auto"):
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise ConfigError(f"{config.where('report_to')}: key 'report_to': unknown reporter '{name}'; use none, "
                              f"auto or some of: {', '.join(INTEGRATION_TO_CALLBACK)}")
        if name not in available:
            raise ConfigError(f"{config.where('report_to')}: key 'report_to': {name} is not installed in this "
                              f"environment; pip install {name}, or set report_to: none")


def check_kernels(config: TrainConfig) -> None:
    """Kernels TRL or transformers would fetch or patch in at the first step, refused before it when they cannot come:
    Liger's (use_liger_kernel: the liger-kernel package) and the Hub's (model_init_kwargs use_kernels: the kernels
    package downloads them from the Hugging Face Hub at run time, which HF_HUB_OFFLINE=1, as clusters run, forbids).
    The images carry neither package: their attention kernels are attn_implementation's, built in."""
    trl = config.trl
    if getattr(trl, "use_liger_kernel", False) and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(f"{config.where('use_liger_kernel')}: key 'use_liger_kernel': TRL patches the model with "
                          "the liger-kernel package, which is not installed here; set it to false (attention "
                          "kernels come from attn_implementation) or pip install liger-kernel")
    init = getattr(trl, "model_init_kwargs", None)
    if isinstance(init, dict) and init.get("use_kernels"):
        where = f"{config.where('model_init_kwargs')}: key 'model_init_kwargs': use_kernels"
        if importlib.util.find_spec("kernels") is None:
            raise ConfigError(f"{where}: transformers downloads these kernels from the Hugging Face Hub with the "
                              "kernels package, which is not installed here; drop use_kernels (attention kernels "
                              "come from attn_implementation, built into the image) or pip install kernels")
        if _offline():
            raise ConfigError(f"{where}: transformers downloads these kernels from the Hugging Face Hub at the "
                              "first step, and HF_HUB_OFFLINE is set; drop use_kernels, or run where the Hub is "
                              "reachable once with HF_HUB_OFFLINE unset")


def earlier_run(output: str) -> list[str]:
    """What a previous run left in output: its checkpoint directories and logs."""
    found = [os.path.basename(p) for p in checkpoint_dirs(output)]
    return found + [name for name in RUN_LOGS if os.path.isfile(os.path.join(output, name))]


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


# The operating system's own trees, and the top directories other things live in: never a run's output.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr")
SHARED_TOPS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var")
# What a run writes into its output besides an earlier run's checkpoints and logs: not a sign of anyone else's files.
RUN_OWN = ("vlmgrpo_config.yaml", "runs", ".fa4-kernels")


def system_directory(output: str) -> Optional[str]:
    """What kind of system directory the output is (the file system's root, /etc, /usr/lib, ...), or None."""
    path = os.path.realpath(os.path.expanduser(output))
    if path in SHARED_TOPS:
        return "the file system's root" if path == "/" else f"the system directory {path}"
    for tree in SYSTEM_TREES:
        if path == tree or path.startswith(tree + os.sep):
            return f"inside the system directory {tree}" if path != tree else f"the system directory {tree}"
    return None


def check_output(config: TrainConfig, identity: dict) -> Optional[str]:
    """The output directory is writable, apart from the model, and holds no earlier run unless told to resume it or
    start over; the checkpoint to resume from: --resume's, or after a restart the newest one (None: from step 0)."""
    output = config.trl.output_dir
    where = config.where("output_dir")
    check_output_apart(f"{where}: key 'output_dir'", output, {
        "the model (model_name_or_path)": config.model.model_name_or_path,
        "the adapter (adapter_name_or_path)": config.model.adapter_name_or_path})
    system = system_directory(output)
    if system:
        raise ConfigError(f"{where}: key 'output_dir': {output} is {system}, which a run must not write into; choose "
                          "a directory of its own (a new one under your home, a volume, or the job's scratch)")
    problem = unwritable_directory(output)
    if problem:
        raise ConfigError(f"{where}: key 'output_dir': {problem}")
    # A --resume PATH that is no checkpoint, or another run's, fails here, before any weights.
    resume = resolve_resume(config.run.resume or ("auto" if restart_count() else None), output, identity)
    if config.run.resume and config.run.overwrite_output:
        raise ConfigError(f"{config.where('overwrite_output')}: --overwrite-output starts over and --resume "
                          f"{config.run.resume} continues: give one of them")
    if under_torchrun() or config.run.resume or config.run.overwrite_output:
        return resume  # under torchrun the launching process has checked (and cleared) it already
    found = earlier_run(output)
    if found:
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(f"{where}: key 'output_dir': {output} already holds an earlier run ({shown}); continue it "
                          "with --resume auto, start over with --overwrite-output (removes its checkpoints and "
                          "logs), or choose another --output")
    others = sorted(os.listdir(output)) if os.path.isdir(output) else []
    others = [name for name in others if name not in RUN_OWN]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ConfigError(f"{where}: key 'output_dir': {output} is not empty ({shown}) and holds no earlier run: the "
                          "run would write its model, config and logs over what is there; choose a new or empty "
                          "--output, or pass --overwrite-output to write into it anyway")
    return resume


def clear_earlier_run(config: TrainConfig) -> list[str]:
    """--overwrite-output: remove the earlier run's checkpoints and logs (once, by the launching process)."""
    output = config.trl.output_dir
    if not config.run.overwrite_output or under_torchrun() or config.run.node_rank != 0:
        return []
    removed = []
    for name in earlier_run(output):
        path = os.path.join(output, name)
        try:
            if os.path.islink(path):  # a checkpoint linked in from elsewhere: the link goes, what it points to stays
                name = f"{name} (a link; {os.readlink(path)} kept)"
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError as error:
            raise ConfigError(f"{config.where('overwrite_output')}: --overwrite-output: cannot remove {path} "
                              f"({error.strerror or error}); remove it yourself, or choose another --output") from None
        removed.append(name)
    return removed


def load_rows(config: TrainConfig, validate_row: RowValidator) -> LoadedData:
    """Every training and evaluation row, validated, and the validation split."""
    if config.data.eval_data and config.data.val_split_ratio:
        raise ConfigError(f"{config.where('eval_data')}: key 'eval_data': give evaluation rows either as eval_data or "
                          "by val_split_ratio, not both")
    seed = config.trl.data_seed or config.trl.seed
    data = load_data(config.data.data, config.data.image_root, getattr(config.data, "box_space", ABSOLUTE),
                     seed=seed, validate=validate_row, eval_entries=config.data.eval_data,
                     reward_method=getattr(config.data, "reward_method", None))
    data.split_validation(config.data.val_split_ratio, seed)
    return data


def load_checked_data(config: TrainConfig) -> LoadedData:
    """What `score` and `eval` need too: the rewards checked, every data row, the validation split."""
    check_rewards(config)
    return load_scored_rows(config)


def check_rewards(config: TrainConfig) -> dict[str, RewardFunc]:
    """Every reward name known or importable, one weight for each; the custom functions by name, imported."""
    names = config.reward.reward_funcs
    custom = check_reward_names(names, config.where("reward_funcs"))
    weights = config.trl.reward_weights
    if weights is not None and len(weights) != len(names):
        raise ConfigError(f"{config.where('reward_weights')}: key 'reward_weights': {len(weights)} weights for "
                          f"{len(names)} reward_funcs {names}")
    return custom


def load_scored_rows(config: TrainConfig) -> LoadedData:
    """Every row, checked for what its rewards need (a box, a method, a judge that answers)."""
    names = config.reward.reward_funcs
    data = load_rows(config, functools.partial(validate_row, require_box=any(name in BOX_REWARDS for name in names),
                                               check_method=JSONL_ACCURACY in names))
    if JSONL_ACCURACY in names and any(row.reward_method == LLM for row in data.samples + data.validation):
        check_judge(config)
    warn_boxes_scored_as_text(config, data)
    return data


def warn_boxes_scored_as_text(config: TrainConfig, data: LoadedData) -> None:
    """accuracy meant REC's IoU here until it followed VLM-R1: a REC config that still says it, without
    is_reward_customized_from_vlm_module, now scores its boxes by the default method (math or exact text). Said once."""
    if config.reward.is_reward_customized_from_vlm_module is not None or "reward_funcs" not in config.notes:
        return
    boxed = [row for row in data.samples if row.solution is not None and row.reward_method == DEFAULT_METHOD]
    if boxed:
        logging.getLogger("vlmgrpo").warning(
            "%s: reward 'accuracy' scores %d of %d rows, whose answers are boxes, by the default method (a math or "
            "exact match of the answer text), as VLM-R1 does without is_reward_customized_from_vlm_module; for "
            "REC's IoU write the reward iou, or set is_reward_customized_from_vlm_module true",
            config.where("reward_funcs"), len(boxed), len(data.samples))


def check_judge(config: TrainConfig) -> None:
    """Rows scored by the llm method need a judge that answers now, not a reward of 0 at step 1."""
    from vlmgrpo.rewards.judge import Judge

    judge = Judge.from_config(config.reward, config.where("judge_url"))
    if judge is None:
        raise ConfigError(f"{config.where('judge_url')}: key 'judge_url': rows are scored by the llm method "
                          "(accu_reward_method): set judge_url and judge_model to the judge's OpenAI-compatible "
                          "endpoint")
    judge.check(config.where("judge_url"))


def check_evaluation(config: TrainConfig) -> None:
    strategy = config.trl.eval_strategy
    if strategy != "no" and not (config.data.val_split_ratio or config.data.eval_data):
        raise ConfigError(f"{config.where('eval_strategy')}: key 'eval_strategy': {strategy} needs rows to evaluate "
                          "on; set val_split_ratio (e.g. 0.05) to hold some out, or eval_data")


def check_run(config: TrainConfig) -> Resolved:
    """The checks `train` and `sft` share: model and adapter, output, evaluation, reporters, QLoRA, DeepSpeed; what
    they resolved."""
    check_model_source(config)
    identity = run_identity(config.command.name, config.model.model_name_or_path)
    resume = check_output(config, identity)
    check_evaluation(config)
    check_reporting(config)
    check_kernels(config)
    check_quantization(config)
    deepspeed = resolve_deepspeed(config.trl.deepspeed)  # a missing or broken JSON fails here, before any model
    if deepspeed and importlib.util.find_spec("deepspeed") is None:
        raise LaunchError(f"deepspeed {config.trl.deepspeed} requested but the deepspeed package is not "
                          "installed; use an image with DeepSpeed or drop --deepspeed")
    return Resolved(deepspeed, resume, identity)
