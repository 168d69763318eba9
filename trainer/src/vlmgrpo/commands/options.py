"""What every command of the CLI shares: user errors printed as one line, options turned into config keys."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from vlmgrpo.commands import flags
from vlmgrpo.commands.trl_help import HELP as TRL_HELP
from vlmgrpo.config.sections import RunConfig, field_default, field_help
from vlmgrpo.errors import UserError


def fail(error: UserError) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(error.exit_code)


# Options -> config keys, where the key is not the option's own name.
RENAMED = {"model": "model_name_or_path", "adapter": "adapter_name_or_path", "output": "output_dir",
           "batch_size": "per_device_train_batch_size"}


def config_key(name: str) -> str:
    """The config key an option sets, from its flag (--max-steps) or its parameter name (max_steps)."""
    name = name.lstrip("-").replace("-", "_")
    return RENAMED.get(name, name)


def collect_overrides(options: dict[str, Any], said: dict[str, str] | None = None) -> dict[str, Any]:
    """The keys the options and --set give; said: each key -> how the command line gave it (filled here), so that a
    key given twice, by two spellings or two sources, is one error and not the last one silently."""
    set_values, overrides, said = options.pop("set_values"), {}, {} if said is None else said
    if set_values:  # config.load imports TRL (seconds): only when needed, so a launch contradiction is said at once
        from vlmgrpo.config.load import parse_set

        overrides = parse_set(set_values)
        said.update({key: f"--set {key}=..." for key in overrides})
    for option, value in options.items():
        if value is not None and value != ():
            key = config_key(option)
            flags.given_twice(said, key, f"--{option.replace('_', '-')}")
            overrides[key] = list(value) if isinstance(value, tuple) else value
    return overrides


class OnceCommand(click.Command):
    """A command whose options are each given once: click keeps the last of `--output A --output B` silently (an
    option that takes several, `multiple`, or counts its uses excepted)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))
        seen = set()
        for param in order:
            if isinstance(param, click.Option) and not (param.multiple or param.count):
                if param.name in seen:
                    raise click.UsageError(f"{' / '.join(param.opts + param.secondary_opts)} is given twice; give "
                                           "it once", ctx)
                seen.add(param.name)
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    command_class = OnceCommand


def section_help(section: type, name: str, more: str = "") -> dict[str, Any]:
    """The metadata of an option for a key of one of vlmgrpo's sections (sections.py): its help is that field's, one
    text for the file, `--print-config` and the command line (`more` says what only the command line adds)."""
    return {"help": field_help(section, name), "more": more, "key": name}


def launch_help(name: str) -> dict[str, Any]:
    """A launch key: without the flag, train and sft read it from the scheduler's variables (launch/schedulers.py)."""
    where = f"Default: from the environment (Kubeflow, Slurm, NNODES ...), else {field_default(RunConfig, name)}."
    return section_help(RunConfig, name, where)


# The TRL fields (and ModelConfig's) the command line sets; trainer/scripts/trl_help.py copies their help.
TRL_KEYS: set[str] = set()


def trl_help(name: str, more: str = "") -> dict[str, Any]:
    """The metadata of an option for a field of TRL's config or of the model's section: the help is the field's, as
    TRL writes it (copied by trainer/scripts/trl_help.py, so that `--help` does not import TRL); `more` is what only
    the command line adds."""
    key = config_key(name)
    TRL_KEYS.add(key)
    return {"help": TRL_HELP.get(key, ""), "more": more, "key": key}


METAVARS = {"bool": "[true|false]", "list": "V [V ...]", "list_str": "V [V ...]"}


def all_flags_text(recipe) -> str:
    """Every field of the command's TRL config and of the model's as a flag, with TRL's help (the copy in
    trl_fields.json, by trainer/scripts/trl_help.py: listing them imports no TRL), then vlmgrpo's sections' fields
    and VLM-R1's ignored arguments."""
    from vlmgrpo.config import sections

    FIELDS = json.loads((Path(__file__).with_name("trl_fields.json")).read_text(encoding="utf-8"))

    formatter = click.HelpFormatter()
    for title, table in ((f"trl.{recipe.trl_class}", FIELDS[recipe.trl_class]), ("ModelConfig", FIELDS["ModelConfig"])):
        with formatter.section(f"Fields of {title} (--name or --name-with-dashes)"):
            formatter.write_dl([(f"--{name} {METAVARS.get(how, 'VALUE')}", text)
                                for name, (how, text) in sorted(table.items())])
    ours = [section for section in (sections.RecDataConfig if recipe.name == "train" else sections.DataConfig,
                                    sections.RewardConfig if recipe.name == "train" else None, sections.RunConfig)
            if section is not None]
    with formatter.section("vlmgrpo's keys (also flags)"):
        formatter.write_dl([(f"--{f.name}", f.metadata.get("help", "")) for section in ours
                            for f in dataclasses.fields(section)])
    with formatter.section("VLM-R1's grpo_jsonl.py arguments that set nothing here (accepted, with a warning)"):
        formatter.write_dl([(f"--{name}", why) for name, why in flags.IGNORED.items()])
    return formatter.getvalue()
