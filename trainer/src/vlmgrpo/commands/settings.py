"""What `vlmgrpo merge`, `selftest` and `make-tiny` are asked, as dataclasses whose fields make their options
(fields.py): the help of each option is its field's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from vlmgrpo.models.tiny import FAMILIES


@dataclass
class MergeSettings:
    """The adapter to merge, into which base model, and where the merged model goes."""
    adapter: str = field(metadata={"help": "The PEFT adapter directory (a LoRA run's OUTPUT/adapter).",
                                   "required": True})
    output: str = field(metadata={"help": "Directory for the merged model.", "required": True})
    model: Optional[str] = field(default=None, metadata={
        "help": "Its base model (default: the one its adapter_config.json names)."})
    overwrite_output: bool = field(default=False, metadata={"help": "Replace an existing --output."})


# The order of merge's options in --help.
MERGE_OPTIONS = ("adapter", "model", "output", "overwrite_output")


@dataclass
class SelftestSettings:
    """What the in-image checks read, and how strict they are."""
    expected: Optional[str] = field(default=None, metadata={
        "help": "Expected versions JSON (default $IMAGEGEN_EXPECTED, which the image sets)."})
    require_gpu: bool = field(default=False, metadata={
        "help": "GPU checks fail instead of skip when no GPU is visible."})
    skip_train: bool = field(default=False, metadata={"help": "Skip the tiny two-step GRPO run."})
    skip_versions: bool = field(default=False, metadata={
        "help": "Leave out the version.<key> checks of what the inventory reads (imagegen test reports them from "
                "the inventory itself); cuDNN and NCCL read from torch stay."})


@dataclass
class TinySettings:
    """The tiny model and data `make-tiny` writes."""
    out: str = field(metadata={"help": "Directory for model/ and data/.", "required": True})
    rows: int = field(default=16, metadata={"help": "Data rows to write (one image each for a vision family)."})
    seed: int = field(default=0, metadata={
        "help": "Seed of the random weights and rows: the same seed writes the same model and data."})
    family: str = field(default=FAMILIES[0], metadata={
        "help": "Model family: a vision-language one writes REC rows with images, a text-only one chat rows.",
        "choices": FAMILIES})
