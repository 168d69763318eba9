"""The model's section of vlmgrpo's configuration: TRL's ModelConfig (its fields are TRL's: model_name_or_path,
dtype, use_peft, lora_*, load_in_4bit, bnb_4bit_quant_type, use_bnb_nested_quant, ...) with vlmgrpo's defaults and
extras. Apart from sections.py because it imports trl."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import trl

from vlmgrpo.config.sections import with_help

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class ModelConfig(trl.ModelConfig):
    """TRL's model settings with vlmgrpo's defaults (attention and dtype chosen for the hardware, LoRA rank 64, alpha
    128, the language model's projections, nested 4-bit quantization) and its own extras."""

    dtype: str = field(default="auto", metadata=with_help(
        "Weights' dtype: auto (bfloat16 on a bf16-capable GPU, float32 on the CPU), bfloat16, float16, float32.",
        choices=["auto", "bfloat16", "float16", "float32"]))
    attn_implementation: str = field(default="auto", metadata=with_help(
        "auto: flash_attention_4 where the image has flash-attn-4 and every GPU runs it (sm90 to sm12x with "
        "transformers 5.24), else flash_attention_2 where flash-attn 2 imports and every GPU is sm80+, else sdpa. "
        "flash_attention_2 runs as flash_attention_4 in an image that has only 4; a flash-attention choice that "
        "cannot run here is an error before weights load.",
        choices=["auto", "flash_attention_4", "flash_attention_2", "sdpa", "eager"]))
    lora_r: int = field(default=64, metadata=with_help("LoRA rank."))
    lora_alpha: int = field(default=128, metadata=with_help(
        "LoRA alpha (the update is scaled by lora_alpha / lora_r)."))
    lora_target_modules: list[str] = field(default_factory=lambda: list(LORA_TARGETS), metadata=with_help(
        "Names of the language model's linear layers LoRA adapts; the vision tower's modules are left out by name."))
    use_bnb_nested_quant: bool = field(default=True, metadata=with_help(
        "QLoRA: quantize the 4-bit quantization constants too (bitsandbytes' double quantization)."))
    adapter_name_or_path: Optional[str] = field(default=None, metadata=with_help(
        "A PEFT adapter to start from (an earlier run's OUTPUT/adapter); the base model is the one its "
        "adapter_config.json names unless model_name_or_path is set. With use_peft the adapter trains on; without, "
        "it is merged into the base model first."))
    min_pixels: Optional[int] = field(default=None, metadata=with_help(
        "Smallest image area, in pixels, the processor resizes to (Qwen2-VL, Qwen2.5-VL); default: the processor's."))
    max_pixels: Optional[int] = field(default=None, metadata=with_help(
        "Largest image area, in pixels, the processor resizes to; lower it when memory is tight."))
    freeze_vision_tower: bool = field(default=False, metadata=with_help(
        "Train the language model only: the vision tower's weights stay as loaded."))
    merge_lora: bool = field(default=False, metadata=with_help(
        "With use_peft, also write the adapter merged into the base model to OUTPUT/merged."))

    def __post_init__(self):
        targets = self.lora_target_modules
        super().__post_init__()
        # TRL turns a one-name list into a string (a regex for PEFT); vlmgrpo joins the names into its own regex.
        self.lora_target_modules = targets
