"""Finding checkpoints to resume from, and restoring a vision-language model's weights from one (RestoresWeights).

transformers 5.x saves checkpoints with the legacy key names (e.g. `model.layers.*`, `visual.*` for Qwen2.5-VL)
while the in-memory model uses new ones (`model.language_model.layers.*`, `model.visual.*`). Trainer's resume
loads the file with load_state_dict(strict=False), so for such models nothing is restored and training silently
continues from the base weights (transformers#43701). We load through from_pretrained, which knows the key
conversion, and check that every tensor arrived.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Optional

from .errors import ConfigError

log = logging.getLogger("vlmgrpo")

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_dirs(output_dir: str) -> list[str]:
    """Every checkpoint-N directory under output_dir, complete or not, by step."""
    if not os.path.isdir(output_dir):
        return []
    found = [(int(match.group(1)), os.path.join(output_dir, entry)) for entry in os.listdir(output_dir)
             if (match := _CHECKPOINT.match(entry)) and os.path.isdir(os.path.join(output_dir, entry))]
    return [path for _, path in sorted(found)]


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


def resolve_resume(resume: Optional[str], output_dir: str) -> Optional[str]:
    if not resume:
        return None
    if resume == "auto":
        checkpoint = latest_checkpoint(output_dir)
        if checkpoint is None:
            log.warning("--resume auto: no checkpoint under %s, starting fresh", output_dir)
        return checkpoint
    if not is_complete(resume):
        raise ConfigError(f"--resume {resume}: not a checkpoint directory (no trainer_state.json); "
                          "give a checkpoint-N directory or 'auto'")
    return resume


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
        if self.is_deepspeed_enabled or self.is_fsdp_enabled or hasattr(target, "peft_config"):
            super()._load_from_checkpoint(resume_from_checkpoint, model)
            return
        count = restore_weights(target, resume_from_checkpoint)
        log.info("restored %d weight tensors from %s", count, resume_from_checkpoint)
