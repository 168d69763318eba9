"""Loading the policy: model, processor, attention kernel, dtype, frozen vision tower, LoRA."""

from __future__ import annotations

import importlib.util
import logging
import re
from typing import Optional

from .boxes import ABSOLUTE, NORM1000, RESIZED
from .config import ModelConfig
from .errors import ConfigError

log = logging.getLogger("vlmgrpo")

VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def flash_attn_usable() -> bool:
    """flash-attn 2 needs the package and an Ampere or newer GPU."""
    import torch

    if not torch.cuda.is_available() or importlib.util.find_spec("flash_attn") is None:
        return False
    return all(torch.cuda.get_device_capability(i)[0] >= 8 for i in range(torch.cuda.device_count()))


def choose_attention(requested: str) -> str:
    if requested in ("sdpa", "eager"):
        return requested
    if flash_attn_usable():
        return "flash_attention_2"
    if cuda_available():
        log.warning("flash_attention_2 unavailable (flash_attn not importable or a GPU below sm80): using sdpa")
    return "sdpa"


def choose_dtype(requested: str):
    import torch

    if requested != "auto":
        return getattr(torch, requested)
    if cuda_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def from_pretrained(auto_class, name: str, **kwargs):
    """A hub id that does not exist, or a download that fails, is the user's to fix: one line, no traceback."""
    try:
        return auto_class.from_pretrained(name, **kwargs)
    except OSError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"key 'model_name_or_path': cannot load {name} ({reason}); give the directory of a saved "
                          "model, or a hub id this machine can download") from None


def load_config(name: str):
    from transformers import AutoConfig

    return from_pretrained(AutoConfig, name)


def load_processor(config: ModelConfig):
    from transformers import AutoProcessor

    kwargs = {}
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


def load_model(config: ModelConfig):
    from transformers import AutoModelForImageTextToText

    dtype = choose_dtype(config.torch_dtype)
    attention = choose_attention(config.attn_implementation)
    if not cuda_available():
        log.warning("no GPU visible: training on the CPU in %s (slow; fine for tiny models and tests)",
                    str(dtype).replace("torch.", ""))
    model = from_pretrained(AutoModelForImageTextToText, config.model_name_or_path, dtype=dtype,
                            attn_implementation=attention)
    if config.freeze_vision_tower:
        freeze_vision_tower(model)
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
    """LoRA on the language model only: the regex skips every module under the vision tower."""
    from peft import LoraConfig

    vision = "|".join(VISION_MODULE_NAMES)
    targets = "|".join(re.escape(t) for t in config.lora_target_modules)
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=rf"^(?!.*\b({vision})\b).*\.({targets})$",
        task_type="CAUSAL_LM",
    )


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


def resize_function(processor) -> Optional[callable]:
    """(width, height) of an original image -> (width, height) the Qwen-VL image processor feeds the model."""
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None or not hasattr(image_processor, "merge_size"):
        return None
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    factor = image_processor.patch_size * image_processor.merge_size
    size = image_processor.size
    min_pixels = size.get("shortest_edge", size.get("min_pixels")) if hasattr(size, "get") else size.shortest_edge
    max_pixels = size.get("longest_edge", size.get("max_pixels")) if hasattr(size, "get") else size.longest_edge

    def resize(width: int, height: int) -> tuple[int, int]:
        new_height, new_width = smart_resize(height, width, factor=factor, min_pixels=min_pixels,
                                             max_pixels=max_pixels)
        return new_width, new_height

    return resize
