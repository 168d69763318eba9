"""Command-line options made from the fields of settings dataclasses, as TRL's HfArgumentParser makes its arguments
from its configs: a field's `metadata` holds its help (and, where the command line needs them, its flag, its least
value, its environment variable, its choices, its metavar and `more`: what only the command line adds). The flag's
type and default are the field's. One place for each option's help: the field; tests/test_option_fields.py checks
every option of every command against the field it was made from.

Keys of `metadata`: help; flag (default: --the-name; --on/--off for a bool that has both); more; min (an
IntRange/FloatRange's least value); envvar; choices; metavar; default (the option's, where it differs from the field's:
unset on the command line, settled later); required.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

import click


class FieldOption(click.Option):
    """A click option that knows the field it was made from, so that a test can tell it from one written by hand."""

    def __init__(self, *args, field: dataclasses.Field, **kwargs):
        super().__init__(*args, **kwargs)
        self.field = field


def help_text(found: dataclasses.Field) -> str:
    """The option's help: the field's, then what only the command line adds."""
    return " ".join(filter(None, (found.metadata["help"], found.metadata.get("more"))))


def flag(found: dataclasses.Field) -> str:
    return found.metadata.get("flag") or "--" + found.name.replace("_", "-")


def _bare(annotation) -> Any:
    """Optional[X] and X | None: X."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _default(found: dataclasses.Field) -> Any:
    if "default" in found.metadata:
        return found.metadata["default"]
    if found.default is not dataclasses.MISSING:
        return found.default
    return () if found.default_factory is not dataclasses.MISSING else None


def _kind(annotation, found: dataclasses.Field) -> dict[str, Any]:
    """click's type (or is_flag, multiple) for a field of this type."""
    meta = found.metadata
    if annotation is bool:
        return {"is_flag": True}
    if typing.get_origin(annotation) in (list, tuple):
        return {"multiple": True}
    if "choices" in meta:
        return {"type": click.Choice(meta["choices"])}
    if annotation is float:
        return {"type": FiniteRange(meta["min"]) if "min" in meta else FINITE}
    if "min" in meta:
        return {"type": click.IntRange(meta["min"])}
    return {"type": annotation} if annotation is int else {}


class _Finite:
    """A float flag is finite: a NaN passes every bound (each comparison with it is false), and `--shutdown-grace
    inf` would wait for good."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class FiniteRange(_Finite, click.FloatRange):
    pass


class _FiniteFloat(_Finite, click.types.FloatParamType):
    pass


FINITE = _FiniteFloat()


def option(found: dataclasses.Field, annotation, **more: Any):
    """The click option of one field (`more`: what click alone needs, such as an eager callback)."""
    meta, default = found.metadata, _default(found)
    settings = _kind(_bare(annotation), found)
    # Shown unless empty or off; by identity, as 0 == False and a default of 0 is shown (make-tiny --seed).
    if not any(default is empty for empty in (None, False)) and default != () and not meta.get("required"):
        settings.update(default=default, show_default=True)
    elif settings.get("is_flag") and default is None:  # unset unless given, so the config file's value stands
        settings["default"] = None
    for key in ("envvar", "metavar", "required"):
        if key in meta:
            settings[key] = meta[key]
    return click.option(flag(found), found.name, cls=FieldOption, field=found, help=help_text(found),
                        **settings | more)


def option_fields(settings: type, *names: str) -> list[dataclasses.Field]:
    """The fields of `settings` that are options, in the order of `names` (all of them, in theirs, without)."""
    found = {each.name: each for each in dataclasses.fields(settings) if "help" in each.metadata}
    return [found[name] for name in names] if names else list(found.values())


def options(settings: type, *names: str) -> list:
    hints = typing.get_type_hints(settings)
    return [option(found, hints[found.name]) for found in option_fields(settings, *names)]


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
