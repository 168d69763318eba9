"""The model a run starts from, the owner of its part of the run plan (training/plan.py): the base model and the adapter
exist and this uid can read them, an adapter without a base names its own, quantized weights can be trained here
(its kind, read from its config.json, is loading.model_kind's). Also what `merge`, `score`, `eval` and `serve`
check of a model. Each failure is one line: what is wrong, where it was set, what to do.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

from vlmgrpo.access import nearest_existing, unreadable, unreadable_in_tree
from vlmgrpo.errors import ConfigError

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig

# Hub repository ids: "name" or "owner/name"; anything else is a local path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class ModelSource:
    base: str  # model_name_or_path: the base model (named by the adapter where the config names none)
    adapter: Optional[str]  # adapter_name_or_path: a saved PEFT adapter to start from; None without
    # The kind: a vision-language model, else a text-only causal LM; None until loading.model_kind reads config.json
    # (which a hub id downloads: the plan asks after its cheap checks)
    vision: Optional[bool] = None


def offline() -> bool:
    """Downloads from the Hugging Face Hub are off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes") for name in
               ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


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


def plan_model(config: TrainConfig) -> ModelSource:
    """The run's model as the config names it, checked before any weights load: source and adapter, quantization."""
    check_model(config.model, config.where, config.origins)
    check_quantization(config)
    return ModelSource(config.model.model_name_or_path, config.model.adapter_name_or_path)


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
    if offline():
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


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_quantization(config: TrainConfig) -> None:
    """QLoRA: 4-bit (or 8-bit) weights under a LoRA adapter, which needs bitsandbytes and a CUDA GPU."""
    key = next((k for k in ("load_in_4bit", "load_in_8bit") if getattr(config.model, k)), None)
    if key is None:
        return
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
