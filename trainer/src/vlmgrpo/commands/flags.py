"""Every field as a flag, the way TRL's own scripts take them (HfArgumentParser through TrlParser): `--epsilon_high
0.28`, `--lora-r 64`, `--bf16` / `--bf16 true` / `--no_bf16`, `--reward_funcs accuracy format`, `--key=value`; and
VLM-R1's grpo_jsonl.py arguments and torchrun's launch flags, so that its run scripts' lines work after `vlmgrpo
train`.

click passes what it does not know through (ignore_unknown_options); this module turns each `--key [value ...]` into
the override `--set key=value` makes, so the config's own checks (unknown keys with the closest names, types,
ranges) judge it. The field set is the command's dataclasses, read when the command runs (TRL is imported then
anyway); `--help-all` lists them from the copy in trl_help.py, so that `--help` never imports TRL.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from vlmgrpo.errors import ConfigError

# VLM-R1's grpo_jsonl.py script arguments (and those of TRL's ScriptArguments it extends) that are no key here:
# each is accepted and said to be ignored, with why. Its others are keys already (data_file_paths, image_folders,
# reward_funcs, reward_method, task_type, val_split_ratio, min_pixels, max_pixels, freeze_vision_modules).
IGNORED = {
    "dataset_name": "the rows come from data_file_paths (VLM-R1's scripts pass a placeholder)",
    "dataset_config": "the rows come from data_file_paths",
    "dataset_train_split": "the rows come from data_file_paths",
    "dataset_test_split": "the evaluation rows come from eval_data or val_split_ratio",
    "dataset_streaming": "the rows come from data_file_paths, read whole",
    "arrow_cache_dir": "the rows are read from the JSONL files each run, no Arrow cache",
    "ignore_bias_buffers": "DDP's bias-buffer workaround is not needed by the models trained here",
    "gradient_checkpointing_use_reentrant": "set gradient_checkpointing_kwargs instead",
    "max_anyres_num": "InternVL's tiles per image follow its processor's config (max_dynamic_patch) here",
}
# The script torchrun runs in VLM-R1's lines (src/open_r1/grpo_jsonl.py): vlmgrpo is that script here.
SCRIPT_SUFFIX = ".py"


def kind(annotation) -> str:
    """How HfArgumentParser reads a field of this type: bool (a flag, or one true/false), list (nargs +), str (the
    text as written) or value (read as YAML: numbers, null, mappings)."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):  # Optional[X] and X | None: X's kind; a wider union is a value
        return kind(args[0]) if len(args) == 1 else "value"
    if annotation is bool:
        return "bool"
    if origin is list:
        return "list_str" if typing.get_args(annotation) == (str,) else "list"
    return "str" if annotation is str else "value"


def field_kinds(recipe) -> dict[str, str]:
    """Every key of the command (its TRL config's fields and its sections') and its other names, with its kind."""
    from vlmgrpo.config.load import KEY_ALIASES, section_field_types, trl_field_types

    kinds = {key: kind(annotation) for key, annotation in trl_field_types(recipe).items()}
    kinds.update({key: kind(annotation) for key, annotation in section_field_types(recipe).items()})
    kinds.update({alias: kinds[key] for alias, key in KEY_ALIASES.items() if key in kinds})
    return kinds


def _read(text: str, how: str):
    from vlmgrpo.config.load import load_yaml

    # YAML 1.1 reads yes/no/on/off as booleans; HfArgumentParser keeps them as text (a str | bool field's "no").
    if how in ("str", "list_str") or text.lower() in ("yes", "no", "on", "off", "y", "n"):
        return text
    try:
        return load_yaml(text)
    except Exception:  # noqa: BLE001 - a text YAML cannot read is meant as text
        return text


def _value(flag: str, key: str, how: str, words: list[str]):
    if how == "bool":
        if not words:
            return True
        if len(words) == 1 and str(words[0]).lower() in ("true", "false", "yes", "no", "1", "0"):
            return str(words[0]).lower() in ("true", "yes", "1")
        raise ConfigError(f"command line: {flag} takes true or false (or nothing, for true), got {' '.join(words)}")
    if not words:
        raise ConfigError(f"command line: {flag} needs a value: {flag} VALUE (or --set {key}=VALUE)")
    if how.startswith("list") or len(words) > 1:
        return [_read(word, how) for word in words]
    return _read(words[0], how)


def split_flags(args: typing.Sequence[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """[(flag, its words)] in order, and the positional words: before the first flag, or a script after a flag that
    has its value (torchrun's `--master_port=12349 src/open_r1/grpo_jsonl.py` in VLM-R1's lines)."""
    flags: list[tuple[str, list[str]]] = []
    loose: list[str] = []
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            flag, sep, value = arg.partition("=")
            flags.append((flag, [value] if sep else []))
        elif flags and not (arg.endswith(SCRIPT_SUFFIX) and flags[-1][1]):
            flags[-1][1].append(arg)
        else:
            loose.append(arg)
    return flags, loose


def _resolve(flag: str, kinds: dict[str, str]) -> tuple[str, str, bool]:
    """(key, kind, negated) of a flag: `--lora-r` is lora_r, `--no_bf16` sets bf16 false (as HfArgumentParser)."""
    key = flag[2:].replace("-", "_")
    if key in kinds or key in IGNORED:
        return key, kinds.get(key, "value"), False
    if key.startswith("no_") and kinds.get(key[3:]) == "bool":
        return key[3:], "bool", True
    close = difflib.get_close_matches(key, list(kinds), n=3)
    hint = f"; did you mean {', '.join('--' + name for name in close)}?" if close else ""
    raise ConfigError(f"command line: no such option or config key '{flag}'{hint} (`vlmgrpo train --help-all` "
                      "lists every flag)")


def given_twice(said: dict[str, str], key: str, how: str) -> None:
    """Record that `how` gives `key`; a ConfigError when something gave it already (a flag, --set or an option)."""
    if key in said:
        raise ConfigError(f"command line: {said[key]} and {how} both give key '{key}'; give it once")
    said[key] = how


def parse_flags(args: typing.Sequence[str], recipe, said: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], list[str]]:
    """The overrides the flags set, and one note per flag that was read but sets nothing (printed as warnings); said:
    what gave each key already (options.collect_overrides): a key given twice is an error."""
    said = {} if said is None else said
    flags, loose = split_flags(args)
    notes = []
    for word in loose:
        if not word.endswith(SCRIPT_SUFFIX):
            raise ConfigError(f"command line: unexpected argument '{word}'; options are --key value (or --set "
                              "key=value)")
        notes.append(f"{word}: ignored (vlmgrpo {recipe.name} is the training script)")
    kinds, overrides = field_kinds(recipe) if flags else {}, {}  # field_kinds imports TRL: seconds
    for flag, words in flags:
        key, how, negated = _resolve(flag, kinds)
        if key in IGNORED:
            notes.append(f"{flag}: ignored ({IGNORED[key]})")
            continue
        value = _value(flag, key, how, words if not negated else (words or ["true"]))
        if key == "resume_from_checkpoint":
            key, value = _resume(value)
            if key is None:
                continue
        given_twice(said, key, flag)
        overrides[key] = (not value) if negated else value
    return overrides, notes


def _resume(value) -> tuple[Any, Any]:
    """TrainingArguments' resume_from_checkpoint as VLM-R1's scripts pass it: True is the latest complete
    checkpoint (vlmgrpo's resume: auto), a path is that checkpoint, False is none."""
    if value is True or str(value).lower() == "true":
        return "resume", "auto"
    if value is False or value is None or str(value).lower() in ("false", "none", "null", ""):
        return None, None
    return "resume", str(value)
