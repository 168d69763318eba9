"""How the trainer's commands take the options made from the fields of settings dataclasses (imagegen_contract.options
makes each option, for imagegen's commands too): a command is decorated with groups of options and takes each group's
values out of its parameters, as a command may hand some of them on unchanged and build a settings object of others."""

from __future__ import annotations

from typing import Any

from imagegen_contract.options import option_fields


def take(settings: type, values: dict[str, Any]) -> dict[str, Any]:
    """The values of `settings`' option fields, taken out of a command's parameters."""
    return {found.name: values.pop(found.name) for found in option_fields(settings) if found.name in values}


def with_options(*groups):
    """Decorate a command with the options of every group, in order."""
    def decorate(command):
        for each in reversed([each for group in groups for each in group]):
            command = each(command)
        return command

    return decorate
