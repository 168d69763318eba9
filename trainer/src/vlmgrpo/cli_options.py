"""What every command of the CLI shares: user errors printed as one line, options turned into config keys."""

from __future__ import annotations

import sys
from typing import Any

import click

from .errors import UserError


def fail(error: UserError) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(error.exit_code)


# Options -> config keys, where the key is not the option's own name.
RENAMED = {"model": "model_name_or_path", "adapter": "adapter_name_or_path", "output": "output_dir",
           "batch_size": "per_device_train_batch_size"}


def collect_overrides(options: dict[str, Any]) -> dict[str, Any]:
    from .config import parse_set

    overrides = parse_set(options.pop("set_values"))
    for option, value in options.items():
        if value is not None and value != ():
            overrides[RENAMED.get(option, option)] = list(value) if isinstance(value, tuple) else value
    return overrides
