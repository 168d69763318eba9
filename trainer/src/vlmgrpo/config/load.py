"""Run configuration: the command's sections (sections.py) plus every field of its TRL config (trl_configs.py), from
YAML and command-line overrides.

The YAML file is flat: any field of the command's sections (ModelConfig, DataConfig or RecDataConfig, RewardConfig,
RunConfig) or of its TRL config (GRPOConfig for `train`, SFTConfig for `sft`) is a top-level key. Unknown keys and
badly typed values are reported with the file and key before anything heavy runs. The command (a Recipe: its name,
TRL config class with the recipe's defaults, its sections) is passed in by its caller.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import typing
from pathlib import Path
from typing import Any, Optional

import yaml

from imagegen_contract.yamlfile import YamlRefused
from vlmgrpo.config.value_checks import check_choices, check_judge_url, check_question_template, check_ranges
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards import FORMAT, FORMAT_ANSWER, IOU, reward_meaning, vlm_r1_reward
from vlmgrpo.config.model_config import ModelConfig
from vlmgrpo.config.sections import DataConfig, RecDataConfig, RewardConfig, RunConfig
from vlmgrpo.config.template import task_template
from vlmgrpo.config.train_config import TrainConfig
from vlmgrpo.config.values import check_value
from vlmgrpo.config.yamlfile import YamlFileError, load_yaml, read_yaml

# Keys whose values are paths (relative ones are relative to the config file); data entries and image roots may
# be VLM-R1's JOIN-ed lists of several.
PATH_KEYS = ("model_name_or_path", "adapter_name_or_path", "image_root", "deepspeed", "data", "eval_data",
             "chat_template_path")
JOIN = ":"

# The run's shape: printed with where each value came from (a flag, the file, a scheduler's variable).
LAUNCH_KEYS = ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port")

# Other names for canonical keys: vlmgrpo's earlier names (use_lora, torch_dtype, bnb_4bit_use_double_quant, the
# names transformers' BitsAndBytesConfig uses) and VLM-R1's (its GRPOModelConfig and grpo_jsonl.py arguments).
KEY_ALIASES = {
    "use_lora": "use_peft",
    "torch_dtype": "dtype",
    "bnb_4bit_use_double_quant": "use_bnb_nested_quant",
    "freeze_vision_modules": "freeze_vision_tower",
    "data_file_paths": "data",
    "image_folders": "image_root",
}
# Keys whose value may be one string for a list of one.
LIST_KEYS = ("data", "eval_data", "reward_funcs", "lora_target_modules")


def trl_field_types(command) -> dict[str, Any]:
    config_class = command.trl_config_class()
    hints = typing.get_type_hints(config_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_class) if f.init}


def section_field_types(command) -> dict[str, Any]:
    types = {}
    for section in command.sections:
        hints = typing.get_type_hints(section)
        types.update({f.name: hints[f.name] for f in dataclasses.fields(section)})
    return types


# --- loading -------------------------------------------------------------------------------------------------------


def read_yaml_file(path: str) -> dict[str, Any]:
    try:
        values = read_yaml(path, "config file") or {}
    except YamlFileError as exc:
        raise ConfigError(str(exc)) from None
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
        if key.strip() in values:
            raise ConfigError(f"command line: --set {key.strip()}=... is given twice; give it once")
        try:
            values[key.strip()] = load_yaml(raw) if raw else ""
        except YamlRefused as exc:
            raise ConfigError(f"--set {key.strip()}: {exc}") from None
        except yaml.YAMLError:
            values[key.strip()] = raw
    return values


def _unknown_key_error(source: str, key: str, known: typing.Iterable[str], command) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    sections = "/".join(s.__name__.removesuffix("Config").removeprefix("Rec").lower() for s in command.sections)
    return ConfigError(
        f"{source}: unknown key '{key}'{hint}; allowed keys are the fields of vlmgrpo's {sections} configs and of "
        f"trl.{command.trl_class} (list them with `vlmgrpo {command.name} --print-config`)"
    )


def _canonical(origin: str, key: str, value, seen: dict[str, str]):
    """Other spellings: aliased keys, one string for a list of one (VLM-R1's reward names: resolve_rewards)."""
    canonical = KEY_ALIASES.get(key, key)
    if canonical in seen and seen[canonical] != key:
        raise ConfigError(f"{origin}: keys '{seen[canonical]}' and '{key}' both set '{canonical}'; keep one")
    seen[canonical] = key
    if canonical in LIST_KEYS and isinstance(value, str):
        value = [value]
    return canonical, value


def _sort_values(command, layers) -> tuple[dict[type, dict[str, Any]], dict[str, Any], dict[str, str]]:
    """(section -> its keys' values, the TRL config's values that were set, key -> origin), every value checked."""
    ours, trl_types = section_field_types(command), trl_field_types(command)
    owner = {f.name: section for section in command.sections for f in dataclasses.fields(section)}
    sections: dict[type, dict[str, Any]] = {section: {} for section in command.sections}
    trl, origins = {}, {}
    for origin, values in layers:
        seen: dict[str, str] = {}
        for key, value in values.items():
            key, value = _canonical(origin, key, value, seen)
            origins[key] = origin
            if key in ours:
                check_value(origin, key, value, ours[key])
                sections[owner[key]][key] = value
            elif key in trl_types:
                if not (key in ("bf16", "report_to") and value == "auto"):
                    check_value(origin, key, value, trl_types[key])
                trl[key] = value
            else:
                raise _unknown_key_error(origin, key, list(ours) + list(trl_types), command)
    return sections, trl, origins


def _build_sections(sections: dict[type, dict[str, Any]], origins: dict[str, str], source: str) -> dict[type, Any]:
    built = {}
    for section, values in sections.items():
        try:
            built[section] = section(**values)
        except ValueError as exc:  # TRL's ModelConfig: e.g. load_in_8bit and load_in_4bit together
            where = next((origins[key] for key in values if key in origins), source)
            raise ConfigError(f"{where}: {section.__name__}: {exc}") from None
    return built


def build_config(file_values: dict[str, Any], source: str, overrides: dict[str, Any], command,
                 launch=None) -> TrainConfig:
    """Merge the command's defaults < file < the launch's environment variables (a launch.schedulers.Launch) < command
    line, checking every key and value; each value remembers where it was set."""
    environment = [(f"environment variable {where}", {key: value})
                   for key, (value, where) in (launch.values.items() if launch else ())]
    layers = ((source, file_values), *environment, ("command line", overrides))
    from vlmgrpo.config.trl_configs import with_values

    sections, trl, origins = _sort_values(command, layers)
    built = _build_sections(sections, origins, source)
    config = TrainConfig(
        model=built[ModelConfig],
        data=next(value for section, value in built.items() if issubclass(section, DataConfig)),
        reward=built.get(RewardConfig),
        run=built[RunConfig],
        trl=with_values(command.trl_config_class(), trl),
        command=command,
        source=source,
        origins=origins,
        **({"launcher": launch.launcher} if launch else {}),
    )
    if config.reward is not None:
        resolve_rewards(config)
    check_choices(config)
    check_ranges(config)
    check_judge_url(config)
    if isinstance(config.data, RecDataConfig):
        if config.data.task_type and "question_template" not in origins:
            config.data.question_template = task_template(config.data.task_type)
        check_question_template(config)
    return config


def beside(config_file: str, reward: str) -> str:
    """A relative path/to/file.py:function of a configuration file, made relative to that file's directory."""
    module, sep, function = reward.rpartition(":")
    if not sep or not module.endswith(".py") or os.path.isabs(module):
        return reward
    return f"{os.path.join(os.path.dirname(os.path.abspath(config_file)), module)}:{function}"


def resolve_rewards(config: TrainConfig) -> None:
    """VLM-R1's names accuracy and format as its grpo_jsonl.py means them, by is_reward_customized_from_vlm_module
    (rewards.vlm_r1_reward). A config that says accuracy meant IoU here before this followed VLM-R1, so what it means
    now is said in one line at start and above reward_funcs in --print-config."""
    reward = config.reward
    if config.origins.get("reward_funcs") == config.source and os.path.isfile(config.source):
        # A file.py:function the configuration names is the file beside it, as a path in it is read: not a file of
        # that name in whatever directory the command runs in (which was imported and run).
        reward.reward_funcs = [beside(config.source, name) for name in reward.reward_funcs]
    flag = reward.is_reward_customized_from_vlm_module
    resolved = [vlm_r1_reward(name, flag) for name in reward.reward_funcs]
    method = getattr(config.data, "reward_method", None)
    said = [f"{name} = {new}: {reward_meaning(new, method)}" for name, new in zip(reward.reward_funcs, resolved)
            if name != new]
    if flag is None and said and FORMAT in resolved:  # VLM-R1's default would make it format_answer; said, not done
        said.append(f"{FORMAT} stays {reward_meaning(FORMAT, method)} (VLM-R1's generic one is {FORMAT_ANSWER})")
    reward.reward_funcs = resolved
    if not said:
        return
    setting = {None: "unset, VLM-R1's default false", True: "true", False: "false"}[flag]
    note = f"{'; '.join(said)} (is_reward_customized_from_vlm_module {setting})"
    if flag is not True and IOU not in resolved:
        note += "; REC's IoU is the reward iou, or set is_reward_customized_from_vlm_module true"
    config.notes["reward_funcs"] = note
    logging.getLogger("vlmgrpo").info("reward %s", note)


def load_config(path: Optional[str], overrides: dict[str, Any], command, launch=None) -> TrainConfig:
    file_values = read_yaml_file(path) if path else {}
    if path:
        file_values = resolve_relative_paths(file_values, Path(path).parent)
    return build_config(file_values, path or "<defaults>", overrides, command, launch)


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
