"""Options made from the fields of a settings dataclass, which the command then receives whole: a field's `metadata`
holds its option's help and what else the command line needs (flag, metavar, choices, callback, required); the
option's type and default are the field's (`type` in the metadata: a click type of its own, such as a folder that
must exist). One place for each option's help: tests/test_option_fields.py checks every option of every command
against the field it was made from."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any

import click

# The metadata keys handed to click.option as they are.
PASSED = ("metavar", "callback", "required", "type")


class FieldOption(click.Option):
    """A click option that knows the field it was made from, so that a test can tell it from one written by hand."""

    def __init__(self, *args, field: dataclasses.Field, **kwargs):
        super().__init__(*args, **kwargs)
        self.field = field


def flag(found: dataclasses.Field) -> str:
    return found.metadata.get("flag") or "--" + found.name.replace("_", "-")


def _click_type(annotation, found: dataclasses.Field) -> dict[str, Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # X | None: X
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    if annotation is bool:
        return {"is_flag": True}
    if typing.get_origin(annotation) is tuple:
        return {"multiple": True}
    if "choices" in found.metadata:
        return {"type": click.Choice(found.metadata["choices"])}
    if annotation is Path:
        return {"type": click.Path(path_type=Path)}
    return {"type": annotation} if annotation is int else {}


def field_option(found: dataclasses.Field, annotation):
    """The click option of one field: its help the field's, its default the field's (shown unless it is empty)."""
    settings = _click_type(annotation, found) | {key: found.metadata[key] for key in PASSED if key in found.metadata}
    # By identity, as 0 == False: a default of 0 is shown.
    if not any(found.default is empty for empty in (dataclasses.MISSING, None, False)) and found.default != ():
        settings.update(default=found.default, show_default=True)
    return click.option(flag(found), found.name, cls=FieldOption, field=found, help=found.metadata["help"],
                        **settings)


def settings_options(settings: type, *names: str, into: str):
    """Decorate a command with an option per field of `settings` (those of `names`, in that order; all, without),
    and hand it `settings(...)` of their values as the parameter `into`."""
    hints = typing.get_type_hints(settings)
    chosen = {found.name: found for found in dataclasses.fields(settings) if "help" in found.metadata}
    chosen = {name: chosen[name] for name in names} if names else chosen

    def decorate(command):
        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            values = {name: kwargs.pop(name) for name in chosen}
            return command(*args, **{into: settings(**values)}, **kwargs)

        for found in reversed(chosen.values()):
            wrapper = field_option(found, hints[found.name])(wrapper)
        return wrapper

    return decorate
