"""Finding checkpoints to resume from, and restoring a vision-language model's weights from one (RestoresWeights).

transformers 5.x saves checkpoints with the legacy key names (e.g. `model.layers.*`, `visual.*` for Qwen2.5-VL)
while the in-memory model uses new ones (`model.language_model.layers.*`, `model.visual.*`). Trainer's resume
loads the file with load_state_dict(strict=False), so for such models nothing is restored and training silently
continues from the base weights (transformers#43701). We load through from_pretrained, which knows the key
conversion, and check that every tensor arrived.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
from typing import Optional

from imagegen_contract.atomic import write_text
from vlmgrpo.errors import ConfigError

log = logging.getLogger("vlmgrpo")

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# Written into each checkpoint after the trainer saved it: whose run it is and every file's size, so that a resume
# refuses another run's checkpoint and skips one whose files were cut short since.
RECORD = "vlmgrpo_checkpoint.json"
LOAD_FAILED = "vlmgrpo_load_failed"  # a checkpoint whose weights failed to load: a restart takes the one before
_warned: set[str] = set()
# What an earlier run leaves in its output directory besides checkpoints (see callbacks.py and grpo.py).
RUN_LOGS = ("metrics.jsonl", "completions.jsonl")
# What a run writes into its output besides an earlier run's checkpoints and logs: not a sign of anyone else's files.
RUN_OWN = ("vlmgrpo_config.yaml", "runs", ".fa4-kernels")


def checkpoint_dirs(output_dir: str) -> list[str]:
    """Every checkpoint-N directory under output_dir, complete or not, by step."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(match.group(1)), os.path.join(output_dir, entry)) for entry in os.listdir(output_dir)
             if (match := _CHECKPOINT.match(entry)) and os.path.isdir(os.path.join(output_dir, entry))]
    return [path for _, path in sorted(found)]


def earlier_run(output: str) -> list[str]:
    """What a previous run left in output: its checkpoint directories and logs."""
    found = [os.path.basename(p) for p in checkpoint_dirs(output)]
    return found + [name for name in RUN_LOGS if os.path.isfile(os.path.join(output, name))]


def is_complete(checkpoint: str) -> bool:
    return os.path.isfile(os.path.join(checkpoint, "trainer_state.json"))  # an interrupted save lacks it


def latest_checkpoint(output_dir: str) -> Optional[str]:
    """The complete checkpoint-N with the largest N."""
    complete = [path for path in checkpoint_dirs(output_dir) if is_complete(path)]
    return complete[-1] if complete else None


def checkpoint_step(checkpoint: Optional[str]) -> int:
    """The optimizer step a checkpoint was saved at; 0 for a fresh start."""
    if checkpoint is None:
        return 0
    with open(os.path.join(checkpoint, "trainer_state.json")) as stream:
        return int(json.load(stream)["global_step"])


def run_identity(command: str, model: str) -> dict:
    """What makes a checkpoint this run's: the command and the model's weights (weights_manifest), not the path they
    were read from; the model as named, and its config.json's digest, for messages and for records without a
    manifest."""
    digest = _config_digest(model)
    return {"command": command, "model": model, "model_config_sha256": digest, "weights": weights_manifest(model)}


def _config_digest(directory: str) -> Optional[str]:
    config = os.path.join(directory, "config.json")
    if not os.path.isfile(config):
        return None
    with open(config, "rb") as stream:
        return hashlib.sha256(stream.read()).hexdigest()


# The weights are known by a manifest, not by hashing every byte (15 GB for a 7B model, at every start): each weight
# file's name and size, the digest of its safetensors header, and of its first and last MiB; and config.json's
# digest. The header lists every tensor's name, dtype, shape and byte offsets, so another architecture, size,
# dtype or sharding differs there; weights of the same shapes with other values (a fine-tune of the same base, a
# seed) differ in the data, which the first and last MiB of each file sample cheaply. What it misses: files that
# agree in all of that and differ only in between (an edit of a few tensors in the middle of a shard).
EDGE_BYTES = 1 << 20


def _is_weights(name: str) -> bool:
    """model.safetensors, its shards, pytorch_model*.bin; not a training output's training_args.bin."""
    return name.endswith(".safetensors") or (name.endswith(".bin") and "model" in name)


def weights_manifest(model: str) -> Optional[dict]:
    """{file name: {bytes, header_sha256, edges_sha256}, "config.json": digest} of a local model directory (or a
    hub id's cached snapshot); None when no weight file is found there."""
    directory = _model_directory(model)
    if directory is None:
        return None
    files = {name: _weight_digests(os.path.join(directory, name)) for name in sorted(os.listdir(directory))
             if _is_weights(name) and os.path.isfile(os.path.join(directory, name))}
    if not files:
        return None
    files["config.json"] = _config_digest(directory)
    return files


def _model_directory(model: str) -> Optional[str]:
    """The directory the weights are read from: the path itself, or a hub id's snapshot in the cache."""
    if os.path.isdir(os.path.expanduser(model)):
        return os.path.expanduser(model)
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(model, local_files_only=True)  # only what is cached: never a download here
    except Exception:  # noqa: BLE001 - not cached, not a hub id: unknown, compared by name instead
        return None


def _weight_digests(path: str) -> dict:
    size = os.path.getsize(path)
    header = None
    with open(path, "rb") as stream:
        if path.endswith(".safetensors"):
            try:
                (length,) = struct.unpack("<Q", stream.read(8))
                header = hashlib.sha256(stream.read(min(length, size))).hexdigest()
            except struct.error:
                header = None
        stream.seek(0)
        edges = hashlib.sha256(stream.read(EDGE_BYTES))
        stream.seek(max(size - EDGE_BYTES, 0))
        edges.update(stream.read(EDGE_BYTES))
    return {"bytes": size, "header_sha256": header, "edges_sha256": edges.hexdigest()}


def weights_difference(held: dict, found: dict) -> Optional[str]:
    """What differs between a checkpoint's manifest and the model's now, in words; None when nothing does."""
    problems = []
    for name in sorted(set(held) | set(found)):
        was, now = held.get(name), found.get(name)
        if was == now:
            continue
        if was is None or now is None:
            problems.append(f"{name} is {'new' if was is None else 'missing'}")
        elif name == "config.json":
            problems.append("config.json differs")
        elif was.get("header_sha256") != now.get("header_sha256") or was.get("bytes") != now.get("bytes"):
            problems.append(f"{name} holds other tensors (names, dtypes or shapes)")
        else:
            problems.append(f"{name} holds the same tensors with other values")
    if not problems:
        return None
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


def write_record(checkpoint: str, identity: dict) -> None:
    files = {os.path.relpath(os.path.join(root, name), checkpoint): os.path.getsize(os.path.join(root, name))
             for root, _, names in os.walk(checkpoint) for name in names if name != RECORD}
    write_text(os.path.join(checkpoint, RECORD), json.dumps({"identity": identity, "files": files}, indent=1))


def _record(checkpoint: str) -> Optional[dict]:
    try:
        with open(os.path.join(checkpoint, RECORD)) as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return None  # written by an earlier vlmgrpo, or the save was cut before it


def foreign(checkpoint: str, identity: Optional[dict]) -> Optional[str]:
    """Why the checkpoint is another run's (another command, other weights), naming both; None when it is this
    one's. The weights are compared by their manifests wherever the model now lies; a record without one (an earlier
    vlmgrpo, a hub id not in the cache) by the model's name and config.json's digest."""
    held = (_record(checkpoint) or {}).get("identity")
    if not identity or not held:
        return None
    start = (f"{checkpoint} holds a checkpoint of `{held.get('command')}` on {held.get('model')}")
    advice = ("resuming would train one model's weights under the other's name; give the --output of this run, or "
              "--overwrite-output to start over")
    if held.get("command") == identity["command"] and held.get("weights") and identity.get("weights"):
        difference = weights_difference(held["weights"], identity["weights"])
        if difference is None:
            return None
        return f"{start}, whose weights are not those at {identity['model']} now ({difference}): {advice}"
    digests = (held.get("model_config_sha256"), identity["model_config_sha256"])
    if held.get("command") == identity["command"] and held.get("model") == identity["model"] and (
            None in digests or digests[0] == digests[1]):
        return None
    return (f"{start} (config.json sha256 {str(digests[0])[:12]}), not of `{identity['command']}` on "
            f"{identity['model']} ({str(digests[1])[:12]}): {advice}")


def damage(checkpoint: str) -> Optional[str]:
    """Why the checkpoint cannot be trusted to load: a file cut short or missing since its save (its record's
    sizes), a safetensors file shorter than its header says, an earlier load that failed; None when none."""
    if os.path.exists(os.path.join(checkpoint, LOAD_FAILED)):
        return "its weights failed to load before"
    for name, size in ((_record(checkpoint) or {}).get("files") or {}).items():
        path = os.path.join(checkpoint, name)
        found = os.path.getsize(path) if os.path.isfile(path) else None
        if found != size:
            return f"{name} is {'missing' if found is None else f'{found} bytes'}, {size} when it was saved"
    for name in sorted(os.listdir(checkpoint)):
        if name.endswith(".safetensors") and not _whole_safetensors(os.path.join(checkpoint, name)):
            return f"{name} is shorter than its header says"
    return None


def _whole_safetensors(path: str) -> bool:
    """The file is as long as its header says: 8 bytes of header length, the header, then the tensors' data."""
    try:
        with open(path, "rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(length))
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        return os.path.getsize(path) >= 8 + length + max(ends, default=0)
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return False


def resolve_resume(resume: Optional[str], output_dir: str, identity: Optional[dict] = None) -> Optional[str]:
    """The checkpoint to resume from: --resume PATH, refused when it is another run's or damaged; with `auto`, the
    newest complete one of this run whose files are whole, a damaged newer one skipped with a warning."""
    if not resume:
        return None
    if resume != "auto":
        if not is_complete(resume):
            raise ConfigError(f"--resume {resume}: not a checkpoint directory (no trainer_state.json); "
                              "give a checkpoint-N directory or 'auto'")
        problem = foreign(resume, identity) or damage(resume)
        if problem:
            raise ConfigError(f"--resume {resume}: {problem}")
        return resume
    complete = [path for path in checkpoint_dirs(output_dir) if is_complete(path)]
    for checkpoint in reversed(complete):
        problem = foreign(checkpoint, identity)
        if problem:
            raise ConfigError(f"--resume auto: {problem}")
        problem = damage(checkpoint)
        if problem is None:
            return checkpoint
        if checkpoint not in _warned:
            _warned.add(checkpoint)
            log.warning("--resume auto: skipping %s: %s; trying the one before", os.path.basename(checkpoint),
                        problem)
    log.warning("--resume auto: no %scheckpoint under %s, starting fresh", "usable " if complete else "", output_dir)
    return None


def restore_weights(model, checkpoint: str) -> int:
    """Copy the checkpoint's weights into model (same architecture); return the number of tensors restored."""
    import torch

    first = next(model.parameters())
    saved = type(model).from_pretrained(checkpoint, dtype=first.dtype, device_map="cpu")
    saved_state = saved.state_dict()
    target_state = model.state_dict()
    missing = sorted(set(target_state) - set(saved_state))
    if missing:
        raise RuntimeError(f"checkpoint {checkpoint} lacks {len(missing)} tensors of the model, e.g. {missing[:3]}")
    # Sizes say a file is whole, not what it holds: a same-size file of NaN weights was restored, then the run failed
    # with a 95-line traceback. Weights that trained are finite; a run that diverged is no point to continue from.
    broken = [name for name, tensor in saved_state.items()
              if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
    if broken:
        raise ConfigError(f"--resume: {checkpoint} holds {len(broken)} of {len(saved_state)} weight tensors with NaN "
                          f"or infinity (the first {broken[0]}): the run had diverged there, or the file was replaced; "
                          "resume from an earlier checkpoint (--resume PATH) or start over")
    with torch.no_grad():
        for name, tensor in target_state.items():
            tensor.copy_(saved_state[name].to(tensor.device, tensor.dtype))
    del saved
    return len(target_state)



class RestoresWeights:
    """Mixed into a TRL trainer class (before it): resume restores the checkpoint's weights through restore_weights.
    DeepSpeed engine state, FSDP shards and PEFT adapters load by their own keys, through the trainer's loader.
    Trainer._load_from_checkpoint is private: tests/test_private_overrides.py fails by name when its signature
    changes."""

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
        target = self.accelerator.unwrap_model(model if model is not None else self.model)
        try:
            if self.is_deepspeed_enabled or self.is_fsdp_enabled or hasattr(target, "peft_config"):
                super()._load_from_checkpoint(resume_from_checkpoint, model)
                return
            count = restore_weights(target, resume_from_checkpoint)
        except Exception:
            # Marked, so that a restart (--max-restarts) resumes from the checkpoint before instead of this one.
            write_text(os.path.join(resume_from_checkpoint, LOAD_FAILED), "")
            raise
        log.info("restored %d weight tensors from %s", count, resume_from_checkpoint)

    def _load_optimizer_and_scheduler(self, checkpoint):
        """The optimizer's and scheduler's states, which torch loads with weights_only: a file that holds anything
        else (a pickle planted in a checkpoint) is refused by torch, here in one line instead of a 63-line traceback.
        Trainer._load_optimizer_and_scheduler is private: tests/test_private_overrides.py fences it."""
        import pickle

        try:
            super()._load_optimizer_and_scheduler(checkpoint)
        except (pickle.UnpicklingError, EOFError) as error:
            write_text(os.path.join(checkpoint, LOAD_FAILED), "")
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ConfigError(f"--resume: {checkpoint}: its optimizer or scheduler state does not load as plain "
                              f"tensors ({first[:200]}); it was not written by this trainer: resume from an earlier "
                              "checkpoint (--resume PATH) or start over") from None
