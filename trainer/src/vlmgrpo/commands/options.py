"""What every command of the CLI shares: user errors printed as one line, options turned into config keys."""

from __future__ import annotations

import sys
from typing import Any

import click

from vlmgrpo.errors import UserError
from vlmgrpo.config.sections import RunConfig, field_default, field_help


def fail(error: UserError) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(error.exit_code)


# Options -> config keys, where the key is not the option's own name.
RENAMED = {"model": "model_name_or_path", "adapter": "adapter_name_or_path", "output": "output_dir",
           "batch_size": "per_device_train_batch_size"}


def collect_overrides(options: dict[str, Any]) -> dict[str, Any]:
    from vlmgrpo.config.load import parse_set

    overrides = parse_set(options.pop("set_values"))
    for option, value in options.items():
        if value is not None and value != ():
            overrides[RENAMED.get(option, option)] = list(value) if isinstance(value, tuple) else value
    return overrides


def field_option(flag: str, section: type, more: str = "", **kwargs):
    """An option for a key of one of vlmgrpo's sections (sections.py), its help that field's: one text for the file,
    `--print-config` and the command line (`more` says what only the command line adds)."""
    key = flag.lstrip("-").replace("-", "_")
    return click.option(flag, help=" ".join(filter(None, (field_help(section, key), more))), **kwargs)


def launch_option(flag: str, **kwargs):
    """A launch key: without the flag, train and sft read it from the scheduler's variables (launch_env.py)."""
    key = flag.lstrip("-").replace("-", "_")
    where = f"Default: from the environment (Kubeflow, Slurm, NNODES ...), else {field_default(RunConfig, key)}."
    return field_option(flag, RunConfig, where, **kwargs)
