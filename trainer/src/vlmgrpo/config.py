"""Run configuration: our dataclasses plus every field of the command's TRL config, from YAML and command-line
overrides.

The YAML file is flat: any field of the command's sections (ModelConfig, DataConfig or RecDataConfig, RewardConfig,
RunConfig) or of its TRL config (GRPOConfig for `train`, SFTConfig for `sft`) is a top-level key. Unknown keys and
badly typed values are reported with the file and key before anything heavy runs.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ConfigError

# {question} is replaced by the row's question; VLM-R1 spells it {Question}, which works too.
QUESTION_PLACEHOLDERS = ("{question}", "{Question}")
REC_QUESTION_TEMPLATE = (
    "{question} First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags. Output the final answer in JSON format."
)


@dataclass
class ModelConfig:
    model_name_or_path: Optional[str] = None
    # A PEFT adapter to start from (an SFT run's OUTPUT/adapter); the base model is the one its adapter_config.json
    # names unless model_name_or_path is set. With use_lora the adapter trains on; without, it is merged in first.
    adapter_name_or_path: Optional[str] = None
    # auto: flash_attention_2 when flash_attn imports and the GPU is sm80+, else sdpa.
    attn_implementation: str = "auto"
    # auto: bfloat16 on a bf16-capable GPU, float32 on CPU.
    torch_dtype: str = "auto"
    min_pixels: Optional[int] = None
    max_pixels: Optional[int] = None
    freeze_vision_tower: bool = False
    use_lora: bool = False
    lora_r: int = 64
    lora_alpha: int = 128
    lora_dropout: float = 0.05
    # Language-model projections only: the vision tower's modules are excluded by name in model.py.
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    merge_lora: bool = False
    # QLoRA: the base model's linear layers in 4 bits (bitsandbytes, CUDA only) under a LoRA adapter.
    load_in_4bit: bool = False
    bnb_4bit_quant_type: str = "nf4"
    bnb_4bit_use_double_quant: bool = True


@dataclass
class DataConfig:
    # Each entry: a .jsonl/.json data file, a .yaml mixture file, or a mapping
    # {path, image_root, sampling, box_space} (see data.py).
    data: list[Any] = field(default_factory=list)
    image_root: Optional[str] = None
    # Fraction of the rows held out for evaluation (eval loss in metrics.jsonl), as VLM-R1's val_split_ratio; the
    # split is seeded by data_seed.
    val_split_ratio: float = 0.0
    # Or rows of their own to evaluate on: entries as in `data`.
    eval_data: list[Any] = field(default_factory=list)


@dataclass
class RecDataConfig(DataConfig):
    """GRPO's grounding data: boxes in the labels, a question template."""

    # Space of the boxes in the dataset labels: absolute (pixels) or norm1000 (0-1000).
    box_space: str = "absolute"
    question_template: str = REC_QUESTION_TEMPLATE


@dataclass
class RewardConfig:
    # Names: iou, format (VLM-R1's), iou_lenient, format_lenient, or module:function / path/to/file.py:function.
    reward_funcs: list[str] = field(default_factory=lambda: ["iou", "format"])
    iou_threshold: Optional[float] = None
    # Space of the boxes the model answers in. auto: resized for Qwen2.5-VL, norm1000 for Qwen2-VL.
    answer_box_space: str = "auto"
    # Warn when a reward stays 0 or every group has zero std for this many consecutive logged steps.
    zero_reward_patience: int = 20
    # Write every completion with its rewards to OUTPUT/completions.jsonl.
    dump_completions: bool = False


@dataclass
class RunConfig:
    resume: Optional[str] = None  # auto | path to a checkpoint-N directory
    # Start over in an output directory that holds an earlier run: its checkpoints and metrics are removed.
    overwrite_output: bool = False
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    # Seconds torchrun lets workers finish a step and checkpoint after SIGTERM before it kills them.
    shutdown_timeout: int = 600


# VLM-R1's REC recipe (run_grpo_rec.sh), applied on top of TRL's GRPOConfig defaults.
RECIPE_DEFAULTS: dict[str, Any] = {
    "output_dir": "output",
    "num_generations": 8,
    "beta": 0.04,
    "learning_rate": 1e-6,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "max_completion_length": 2048,
    # VLM-R1 averages each completion's token losses, then over the batch: TRL's "grpo" (TRL defaults to "dapo").
    "loss_type": "grpo",
    # VLM-R1 generates with GenerationConfig(do_sample=True, temperature=1) and transformers' defaults for the
    # rest, so top-k 50 (TRL's default top_k 0 turns top-k off).
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.0,
    "num_train_epochs": 2,
    "gradient_checkpointing": True,
    "logging_steps": 1,
    "save_steps": 100,
    "save_only_model": False,  # resume needs the optimizer and scheduler state
    "seed": 42,
    "data_seed": 42,
    "report_to": "auto",  # tensorboard when installed, else none (resolved in resolve_grpo_kwargs)
    "bf16": "auto",  # true on a bf16-capable GPU
}

# SFT: TRL's SFTConfig defaults, the loss on assistant turns only, and the run settings `train` has.
SFT_DEFAULTS: dict[str, Any] = {
    "output_dir": "output",
    "assistant_only_loss": True,
    "save_steps": 500,
    "save_only_model": False,  # resume needs the optimizer and scheduler state
    "seed": 42,
    "data_seed": 42,
    "report_to": "auto",
    "bf16": "auto",
}


@dataclass(frozen=True)
class Command:
    """What differs between `train` and `sft`: its TRL config class, its sections of our keys, its defaults."""

    name: str
    trl_class: str  # the name of a config class in trl
    sections: tuple[type, ...]
    defaults: dict[str, Any] = field(hash=False, compare=False)

    def trl_config_class(self):
        import trl

        return getattr(trl, self.trl_class)


GRPO = Command("train", "GRPOConfig", (ModelConfig, RecDataConfig, RewardConfig, RunConfig), RECIPE_DEFAULTS)
SFT = Command("sft", "SFTConfig", (ModelConfig, DataConfig, RunConfig), SFT_DEFAULTS)


def trl_field_types(command: Command = GRPO) -> dict[str, Any]:
    config_class = command.trl_config_class()
    hints = typing.get_type_hints(config_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_class) if f.init}


def section_field_types(command: Command = GRPO) -> dict[str, Any]:
    types = {}
    for section in command.sections:
        hints = typing.get_type_hints(section)
        types.update({f.name: hints[f.name] for f in dataclasses.fields(section)})
    return types


# Keys whose values are paths (relative ones are relative to the config file); data entries and image roots may
# be VLM-R1's JOIN-ed lists of several.
PATH_KEYS = ("model_name_or_path", "adapter_name_or_path", "image_root", "deepspeed", "data", "eval_data",
             "chat_template_path")
JOIN = ":"

# VLM-R1's names for our keys (its GRPOModelConfig, TRL's ModelConfig and its grpo_jsonl.py arguments).
KEY_ALIASES = {
    "use_peft": "use_lora",
    "freeze_vision_modules": "freeze_vision_tower",
    "data_file_paths": "data",
    "image_folders": "image_root",
}


@dataclass
class TrainConfig:
    model: ModelConfig
    data: DataConfig  # RecDataConfig for `train`
    reward: Optional[RewardConfig]  # `train` only
    run: RunConfig
    trl: dict[str, Any]  # keyword arguments of the command's TRL config (GRPOConfig, SFTConfig)
    command: Command = GRPO
    source: str = "<defaults>"
    origins: dict[str, str] = field(default_factory=dict)  # key -> where its value was set, for error messages

    def where(self, key: str) -> str:
        return self.origins.get(key, self.source)

    def flat(self) -> dict[str, Any]:
        values = {}
        for section in (self.model, self.data, self.reward, self.run):
            if section is not None:
                values.update(dataclasses.asdict(section))
        values.update(self.trl)
        return values


# --- type checking -----------------------------------------------------------------------------------------------

_UNIONS = (typing.Union, types.UnionType)


def _describe(hint) -> str:
    origin = typing.get_origin(hint)
    if origin in _UNIONS:
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(str(member.value) for member in hint)
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def _matches(hint, value) -> bool:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _UNIONS:
        enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
        # "SchedulerType | str" means a SchedulerType name, not any string.
        members = [a for a in args if not (a is str and enums)]
        return any(_matches(arg, value) for arg in members)
    if origin is typing.Literal:
        return value in args
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return value in {member.value for member in hint} or isinstance(value, hint)
    if origin is list:
        return isinstance(value, list) and (not args or all(_matches(args[0], v) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True  # opaque classes (ParallelismConfig...) are left to GRPOConfig itself


def check_value(source: str, key: str, value, hint) -> None:
    if not _matches(hint, value):
        raise ConfigError(f"{source}: key '{key}': {value!r} is not valid, expected {_describe(hint)}")


# --- loading -------------------------------------------------------------------------------------------------------


class YamlLoader(yaml.SafeLoader):
    """PyYAML reads 1e-6 (no dot) as a string, as YAML 1.1 says; YAML 1.2 and every user mean a number."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def load_yaml(text: str):
    return yaml.load(text, Loader=YamlLoader)


def read_yaml_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    try:
        values = load_yaml(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: expected a mapping of key: value at the top level")
    return values


def parse_set(items: typing.Iterable[str]) -> dict[str, Any]:
    """--set key=value; the value is read as YAML so numbers, booleans, lists and null keep their type."""
    values = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set: expected key=value, got {item!r}")
        try:
            values[key.strip()] = load_yaml(raw) if raw else ""
        except yaml.YAMLError:
            values[key.strip()] = raw
    return values


def _unknown_key_error(source: str, key: str, known: typing.Iterable[str], command: Command) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    sections = "/".join(s.__name__.removesuffix("Config").removeprefix("Rec").lower() for s in command.sections)
    return ConfigError(
        f"{source}: unknown key '{key}'{hint}; allowed keys are the fields of vlmgrpo's {sections} configs and of "
        f"trl.{command.trl_class} (list them with `vlmgrpo {command.name} --print-config`)"
    )


def _canonical(origin: str, key: str, value, seen: dict[str, str]):
    """VLM-R1's spellings: aliased keys, the reward name `accuracy`."""
    from .rewards import REWARD_ALIASES

    canonical = KEY_ALIASES.get(key, key)
    if canonical in seen and seen[canonical] != key:
        raise ConfigError(f"{origin}: keys '{seen[canonical]}' and '{key}' both set '{canonical}'; keep one")
    seen[canonical] = key
    if canonical in ("data", "eval_data", "reward_funcs", "lora_target_modules") and isinstance(value, str):
        value = [value]
    if canonical == "reward_funcs" and isinstance(value, list):
        value = [REWARD_ALIASES.get(name, name) for name in value]
    return canonical, value


def build_config(file_values: dict[str, Any], source: str, overrides: dict[str, Any],
                 command: Command = GRPO) -> TrainConfig:
    """Merge the command's defaults < file < command line, checking every key and value."""
    ours = section_field_types(command)
    trl_types = trl_field_types(command)
    sections: dict[type, dict[str, Any]] = {section: {} for section in command.sections}
    trl = dict(command.defaults)
    origins: dict[str, str] = {}
    for origin, values in ((source, file_values), ("command line", overrides)):
        seen: dict[str, str] = {}
        for key, value in values.items():
            key, value = _canonical(origin, key, value, seen)
            origins[key] = origin
            if key in ours:
                check_value(origin, key, value, ours[key])
                section = next(s for s in command.sections if key in {f.name for f in dataclasses.fields(s)})
                sections[section][key] = value
            elif key in trl_types:
                if not (key in ("bf16", "report_to") and value == "auto"):
                    check_value(origin, key, value, trl_types[key])
                trl[key] = value
            else:
                raise _unknown_key_error(origin, key, list(ours) + list(trl_types), command)
    built = {section: section(**values) for section, values in sections.items()}
    config = TrainConfig(
        model=built[ModelConfig],
        data=next(value for section, value in built.items() if issubclass(section, DataConfig)),
        reward=built.get(RewardConfig),
        run=built[RunConfig],
        trl=trl,
        command=command,
        source=source,
        origins=origins,
    )
    check_choices(config)
    check_ranges(config)
    if isinstance(config.data, RecDataConfig):
        check_question_template(config)
    return config


def check_choices(config: TrainConfig) -> None:
    from .boxes import ABSOLUTE, NORM1000, RESIZED

    choices = {
        "attn_implementation": ("auto", "flash_attention_2", "sdpa", "eager"),
        "torch_dtype": ("auto", "bfloat16", "float16", "float32"),
        "bnb_4bit_quant_type": ("nf4", "fp4"),
        "box_space": (ABSOLUTE, NORM1000),
        "answer_box_space": ("auto", ABSOLUTE, NORM1000, RESIZED),
    }
    values = config.flat()
    for key, allowed in choices.items():
        value = values.get(key, allowed[0])  # keys the command does not have
        if value not in allowed:
            raise ConfigError(f"{config.where(key)}: key '{key}': {value!r} is not one of: {', '.join(allowed)}")


# key -> (lowest allowed, whether the lowest is excluded, why); None values (unset) are not checked.
RANGES: dict[str, tuple[float, bool, str]] = {
    "num_generations": (2, False, "GRPO compares at least 2 completions of each prompt"),
    "per_device_train_batch_size": (1, False, "completions per device and step"),
    "per_device_eval_batch_size": (1, False, "completions per device in evaluation"),
    "gradient_accumulation_steps": (1, False, "steps"),
    "max_completion_length": (1, False, "tokens"),
    "max_length": (1, False, "tokens"),
    "learning_rate": (0, True, "a step size"),
    "num_train_epochs": (0, True, "epochs"),
    "save_steps": (0, True, "steps, or a fraction of the run below 1"),
    "logging_steps": (0, True, "steps, or a fraction of the run below 1"),
    "num_iterations": (1, False, "updates per generation"),
    "beta": (0, False, "the KL coefficient"),
    "epsilon": (0, False, "the clipping range"),
    "temperature": (0, True, "the sampling temperature"),
    "top_k": (0, False, "0 turns top-k off"),
    "top_p": (0, True, "a probability mass"),
    "val_split_ratio": (0, False, "a fraction of the rows"),
    "min_pixels": (1, False, "pixels"),
    "max_pixels": (1, False, "pixels"),
    "lora_r": (1, False, "the LoRA rank"),
    "nproc_per_node": (1, False, "processes"),
    "nnodes": (1, False, "hosts"),
    "node_rank": (0, False, "the host's index"),
    "master_port": (1, False, "a TCP port"),
    "zero_reward_patience": (1, False, "logged steps"),
    "shutdown_timeout": (1, False, "seconds"),
}
# key -> (highest allowed, whether the highest is excluded)
UPPER: dict[str, tuple[float, bool]] = {"top_p": (1, False), "val_split_ratio": (1, True), "master_port": (65535, False)}


def check_ranges(config: TrainConfig) -> None:
    values = config.flat()
    for key, (low, open_low, why) in RANGES.items():
        value = values.get(key)
        if value is None:
            continue
        high, open_high = UPPER.get(key, (None, False))
        too_low = value <= low if open_low else value < low
        too_high = high is not None and (value >= high if open_high else value > high)
        if too_low or too_high:
            bounds = f"{'>' if open_low else '>='} {low:g}"
            if high is not None:
                bounds += f" and {'<' if open_high else '<='} {high:g}"
            raise ConfigError(f"{config.where(key)}: key '{key}': must be {bounds} ({why}), got {value}")
    if config.run.node_rank >= config.run.nnodes:
        raise ConfigError(f"{config.where('node_rank')}: key 'node_rank': {config.run.node_rank} is not below "
                          f"nnodes {config.run.nnodes} (ranks count from 0)")
    low, high = config.model.min_pixels, config.model.max_pixels
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{config.where('min_pixels')}: key 'min_pixels': {low} is above max_pixels {high}")


def check_question_template(config: TrainConfig) -> None:
    template = config.data.question_template
    found = [p for p in QUESTION_PLACEHOLDERS if p in template]
    if len(found) != 1:
        problem = "has no" if not found else "mixes"
        raise ConfigError(f"{config.where('question_template')}: key 'question_template' {problem} "
                          f"{' or '.join(QUESTION_PLACEHOLDERS)} placeholder; write {QUESTION_PLACEHOLDERS[0]} "
                          "once where the row's question goes")


def fill_template(template: str, question: str) -> str:
    for placeholder in QUESTION_PLACEHOLDERS:
        template = template.replace(placeholder, question)
    return template


def load_config(path: Optional[str], overrides: dict[str, Any], command: Command = GRPO) -> TrainConfig:
    file_values = read_yaml_file(path) if path else {}
    if path:
        file_values = resolve_relative_paths(file_values, Path(path).parent)
    return build_config(file_values, path or "<defaults>", overrides, command)


def resolve_relative_paths(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Paths in a config file are relative to the file, so a recipe directory can move as a whole.

    Only paths that exist relative to the file are rewritten: hub model names and preset names stay as they are.
    """

    def resolve(value):
        if isinstance(value, dict):
            return {k: resolve(v) if k in ("path", "image_root") else v for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(entry) for entry in value]
        if not isinstance(value, str) or os.path.isabs(value):
            return value
        if JOIN in value:
            return JOIN.join(resolve(part) for part in value.split(JOIN))
        return str(base / value) if (base / value).exists() else value

    return {key: resolve(value) if KEY_ALIASES.get(key, key) in PATH_KEYS else value for key, value in values.items()}


def dump_config(config: TrainConfig) -> str:
    """Every key the run uses, including all fields of the TRL config at their effective values."""
    values = config.flat()
    for f in dataclasses.fields(config.command.trl_config_class()):
        if not f.init or f.name in values:
            continue
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value is not dataclasses.MISSING:
            values[f.name] = value.value if isinstance(value, enum.Enum) else value
    return yaml.safe_dump(values, sort_keys=False, default_flow_style=None)
