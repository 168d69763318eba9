"""The effective configuration as YAML, each key under its help as a comment: what `--print-config` prints and a run
saves as OUTPUT/vlmgrpo_config.yaml. Credentials are never in it."""

from __future__ import annotations

import dataclasses
import enum
import textwrap
from typing import TYPE_CHECKING, Any

import yaml

from vlmgrpo.config.load import KEY_ALIASES, LAUNCH_KEYS
from vlmgrpo.rewards.judge import without_userinfo

if TYPE_CHECKING:
    from vlmgrpo.config.train_config import TrainConfig


def field_help(command) -> dict[str, str]:
    """Every key's help text (the fields' metadata, as TRL keeps it), with its other names."""
    helps = {}
    for config_class in (command.trl_config_class(), *command.sections):
        helps.update({f.name: f.metadata.get("help", "") for f in dataclasses.fields(config_class) if f.init})
    for alias, key in KEY_ALIASES.items():
        if key in helps:
            helps[key] = f"{helps[key]} (Also read as {alias}.)".strip()
    return helps


def effective_values(config: TrainConfig) -> dict[str, Any]:
    """Every key the run uses, including all fields of the TRL config at their effective values."""
    values = config.flat()
    for f in dataclasses.fields(config.trl):
        if f.init and f.name not in values and hasattr(config.trl, f.name):  # TRL gives every field a default
            value = getattr(config.trl, f.name)
            values[f.name] = value.value if isinstance(value, enum.Enum) else value
    return values


# TrainingArguments' credentials (the Hub's token): given, used, never printed or saved.
SECRET_KEYS = ("hub_token", "push_to_hub_token")
HIDDEN = "<given; not printed or saved>"


def dump_config(config: TrainConfig) -> str:
    """The effective configuration as YAML, each key under its help as a comment."""
    helps = field_help(config.command)
    # No user:password@ of a URL in what is printed or saved (judge_url refuses one; this is the second guard), and no
    # credential: --print-config goes to terminals and logs, OUTPUT/vlmgrpo_config.yaml is readable by others (0644).
    values = {key: without_userinfo(value) if isinstance(value, str) and "://" in value else value
              for key, value in effective_values(config).items()}
    values.update({key: HIDDEN for key in SECRET_KEYS if values.get(key)})
    # One block mapping (flow style inside: lists on one line); each key's help goes above the line the key starts.
    text = yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=120)
    keys, lines = iter(values), [f"# launcher: {config.launcher}\n", "\n"]
    key = next(keys, None)
    for line in text.splitlines(keepends=True):
        if key is not None and line.startswith(f"{key}:"):
            lines += [f"# {part}\n" for part in textwrap.wrap(" ".join(helps.get(key, "").split()), 116)]
            # Above the line, not after it: a value that wraps would put the comment inside a flow list.
            lines += [f"# {part}\n" for part in textwrap.wrap(f"Resolved: {config.notes[key]}", 116)
                      ] if key in config.notes else []
            if key in LAUNCH_KEYS and line.endswith("\n"):  # where each launch value came from, on its line
                line = f"{line[:-1]}  # from {config.origins.get(key, 'default')}\n"
            key = next(keys, None)
        lines.append(line)
    return "".join(lines)
