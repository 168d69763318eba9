"""Loading the model: its kind (from its config), processor or tokenizer, dtype, 4-bit weights, frozen vision tower,
LoRA, a starting adapter, in the attention kernel its caller chose (attention.py); merging an adapter into its base
model."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
from typing import TYPE_CHECKING, Optional

from vlmgrpo.boxes import ABSOLUTE, NORM1000, RESIZED
from vlmgrpo.config.model_config import ModelConfig
from vlmgrpo.errors import ConfigError

from vlmgrpo.models.resize import resize_function
from vlmgrpo.models.source import ModelSource, cuda_available

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig

log = logging.getLogger("vlmgrpo")

VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model")


def choose_dtype(requested: str):
    import torch

    if requested != "auto":
        return getattr(torch, requested)
    if cuda_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def from_pretrained(auto_class, name: str, key: str = "model_name_or_path", **kwargs):
    """A hub id that does not exist, or a download that fails, is the user's to fix: one line, no traceback."""
    try:
        return auto_class.from_pretrained(name, **kwargs)
    except OSError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"key '{key}': cannot load {name} ({reason}); give the directory of a saved "
                          "model, or a hub id this machine can download") from None


def load_model_config(name: str):
    """The model's config.json (transformers' AutoConfig); one ConfigError line when it cannot be read."""
    from transformers import AutoConfig

    try:
        return from_pretrained(AutoConfig, name)
    except ValueError as exc:  # no or an unknown model_type
        reason = str(exc).strip().splitlines()[0]
        raise ConfigError(f"key 'model_name_or_path': {name}'s config.json is not one transformers can read "
                          f"({reason})") from None


def model_kind(config: TrainConfig, model: ModelSource) -> ModelSource:
    """The model with its kind, read from its config.json (no weights), and LoRA targets its language model has (a
    new adapter's)."""
    vision = is_vision_language(model.base)
    if config.model.use_peft and not config.model.adapter_name_or_path:
        linear = unmatched_lora_targets(config.model, vision)
        if linear:
            raise ConfigError(f"{config.where('lora_target_modules')}: key 'lora_target_modules': "
                              f"{', '.join(config.model.lora_target_modules)} match no layer of {model.base}'s "
                              f"language model; its linear layers are named {', '.join(linear)}")
    return dataclasses.replace(model, vision=vision)


def is_vision_language(name: str) -> bool:
    """From the model's config, not its name: an image-text-to-text model (True) or a text-only causal LM (False)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    model_type = load_model_config(name).model_type
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return True
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return False
    import transformers

    raise ConfigError(f"key 'model_name_or_path': {name} is a {model_type} model, which transformers "
                      f"{transformers.__version__} knows neither as an image-text-to-text model nor as a causal LM")


def auto_model_class(vision: bool):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if vision else AutoModelForCausalLM


def load_processing_class(config: ModelConfig, vision: bool):
    """The processor of a vision-language model, the tokenizer of a text-only one."""
    if vision:
        return load_processor(config)
    from transformers import AutoTokenizer

    return from_pretrained(AutoTokenizer, config.model_name_or_path, revision=config.model_revision)


def load_processor(config: ModelConfig):
    from transformers import AutoProcessor

    kwargs = {"revision": config.model_revision}
    if config.min_pixels is not None:
        kwargs["min_pixels"] = config.min_pixels
    if config.max_pixels is not None:
        kwargs["max_pixels"] = config.max_pixels
    processor = from_pretrained(AutoProcessor, config.model_name_or_path, **kwargs)
    _apply_pixel_bounds(processor.image_processor, config)
    # Generation batches are left padded so every completion starts at the same position.
    processor.tokenizer.padding_side = "left"
    return processor


def _apply_pixel_bounds(image_processor, config: ModelConfig) -> None:
    """transformers 4.x keeps min/max_pixels as attributes but resizes by `size`: set both."""
    bounds = {"shortest_edge": config.min_pixels, "longest_edge": config.max_pixels}
    bounds = {edge: value for edge, value in bounds.items() if value is not None}
    if bounds and isinstance(getattr(image_processor, "size", None), dict):
        image_processor.size = {**image_processor.size, **bounds}


def quantization(config: ModelConfig, dtype) -> dict:
    """from_pretrained's arguments for QLoRA's 4-bit (or 8-bit) base weights, each process's copy on its own GPU:
    TRL's get_quantization_config, computing (and, unless bnb_4bit_quant_storage says otherwise, storing, as FSDP and
    ZeRO-3 need) in the training dtype."""
    if not (config.load_in_4bit or config.load_in_8bit):
        return {}
    from accelerate import PartialState
    from trl import get_quantization_config

    storage = config.bnb_4bit_quant_storage or dtype
    quantization_config = get_quantization_config(dataclasses.replace(config, dtype=dtype,
                                                                      bnb_4bit_quant_storage=storage))
    return {"quantization_config": quantization_config, "device_map": {"": PartialState().local_process_index}}


def load_model(config: ModelConfig, vision: bool, attention: str):
    """The model as it trains: a vision-language model or a text-only causal LM, in 4 bits for QLoRA, with the
    starting adapter on it (still a PEFT model when use_peft trains it on, merged in otherwise). ATTENTION: the
    kernel its caller chose once (attention.choose_attention; a run's StartedRun.attention, training/started.py)."""
    dtype = choose_dtype(config.dtype)
    if not cuda_available():
        log.warning("no GPU visible: training on the CPU in %s (slow; fine for tiny models and tests)",
                    str(dtype).replace("torch.", ""))
    model = from_pretrained(auto_model_class(vision), config.model_name_or_path, dtype=dtype,
                            attn_implementation=attention, revision=config.model_revision,
                            **quantization(config, dtype))
    if config.freeze_vision_tower:
        freeze_vision_tower(model)
    if config.adapter_name_or_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, config.adapter_name_or_path, is_trainable=config.use_peft)
        if not config.use_peft:
            model = model.merge_and_unload()
    return model


def vision_module_names(model) -> list[str]:
    names = []
    for name, _ in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in VISION_MODULE_NAMES and not any(name.startswith(n + ".") for n in names):
            names.append(name)
    return names


def freeze_vision_tower(model) -> int:
    frozen = 0
    for name in vision_module_names(model):
        for parameter in model.get_submodule(name).parameters():
            parameter.requires_grad_(False)
            frozen += parameter.numel()
    if not frozen:
        log.warning("freeze_vision_tower: no vision module (%s) found in the model", ", ".join(VISION_MODULE_NAMES))
    return frozen


def lora_config(config: ModelConfig):
    """TRL's get_peft_config (rank, alpha, dropout, rsLoRA, DoRA, modules to save, ...) with the targets on the
    language model only: the regex skips every module under the vision tower."""
    from trl import get_peft_config

    vision = "|".join(VISION_MODULE_NAMES)
    targets = "|".join(re.escape(t) for t in config.lora_target_modules)
    pattern = rf"^(?!.*\b({vision})\b).*\.({targets})$"
    return get_peft_config(dataclasses.replace(config, use_peft=True, lora_target_modules=pattern))


def unmatched_lora_targets(config: ModelConfig, vision: bool) -> list[str]:
    """The language model's linear layer names (sorted) when lora_target_modules match none of its modules, else
    []. The model is built on the meta device from its config: no weights are read or allocated."""
    import torch
    from accelerate import init_empty_weights

    pattern = re.compile(lora_config(config).target_modules)
    with init_empty_weights():
        model = auto_model_class(vision).from_config(load_model_config(config.model_name_or_path))
    names = [name for name, _ in model.named_modules()]
    if any(pattern.fullmatch(name) for name in names):
        return []
    vision_prefixes = tuple(f"{name}." for name in vision_module_names(model))
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and not name.startswith(vision_prefixes)})


def peft_config(config: ModelConfig):
    """The LoRA config for the trainer to apply; None without LoRA, or when a starting adapter trains on."""
    return lora_config(config) if config.use_peft and not config.adapter_name_or_path else None


def write_model(model, processing_class, path: str) -> None:
    """save_pretrained into a temporary directory renamed into place: nothing half-written at `path`."""
    partial = f"{path.rstrip(os.sep)}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    processing_class.save_pretrained(partial)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.replace(partial, path)


def merge_adapter(adapter: str, base: str, output: str) -> None:
    """The base model in its saved precision (also for a QLoRA adapter) with the adapter merged into its weights,
    and the adapter's processor or tokenizer (the base model's when the adapter directory has none)."""
    from peft import PeftModel

    vision = is_vision_language(base)
    model = from_pretrained(auto_model_class(vision), base, dtype="auto")
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    has_tokenizer = os.path.isfile(os.path.join(adapter, "tokenizer_config.json"))
    source = ModelConfig(model_name_or_path=adapter if has_tokenizer else base)
    write_model(merged, load_processing_class(source, vision), output)
    log.info("merged %s into %s: %s", adapter, base, output)


def answer_box_space(requested: str, model_type: str) -> str:
    """Qwen2.5-VL answers in pixels of its resized input; Qwen2-VL and InternVL in 0-1000 coordinates (InternVL's
    grounding format, and the space of VLM-R1's InternVL REC data)."""
    if requested != "auto":
        return requested
    if model_type.startswith(("qwen2_vl", "internvl")):
        return NORM1000
    if model_type.startswith(("qwen2_5_vl", "qwen3_vl")):
        return RESIZED
    log.warning("answer_box_space auto: unknown model type %s, assuming absolute pixels", model_type)
    return ABSOLUTE


def answer_space_and_resize(requested: str, model_name: str, processor) -> tuple[str, Optional[callable]]:
    """The space a model answers boxes in (from its config.json, no weights) and its processor's resize."""
    return answer_box_space(requested, load_model_config(model_name).model_type), resize_function(processor)
