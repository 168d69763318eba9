"""Command-line options made from the fields of settings dataclasses, as TRL's HfArgumentParser makes its arguments
from its configs, for both CLIs (`imagegen` and the trainer's `vlmgrpo`), so that a field means the same option on
either side. The option's type and default are the field's; its help is the field's `metadata`, which also holds what
only the command line needs. One place for each option's help: tests/test_option_fields.py checks every option of
every command of both CLIs against the field it was made from.

Keys of `metadata`: help; more (what only the command line adds to the help); flag (default: --the-name; --on/--off
for a bool that has both); choices; min (an IntRange's or a FloatRange's least value); default (the option's where it
differs from the field's: unset on the command line, settled later); and, handed to click.option as they are,
envvar, metavar, callback, required and type (a click type of its own, such as a folder that must exist).

Importable on Python 3.8 like the rest of this distribution: no `X | Y` at run time, no match.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import click

# The metadata keys handed to click.option as they are: click alone reads them.
PASSED = ("envvar", "metavar", "callback", "required", "type")
# X | None is a types.UnionType from Python 3.10 on; before it there is only typing.Union.
UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))


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
    """Optional[X] and X | None: X (a union of several types stays as it is)."""
    if typing.get_origin(annotation) in UNIONS:
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
    if annotation is Path:  # the command gets a Path, as the field says, not the str click gives by default
        return {"type": click.Path(path_type=Path)}
    if "min" in meta:
        return {"type": click.IntRange(meta["min"])}
    return {"type": annotation} if annotation is int else {}


class _Finite:
    """A float option is finite: a NaN passes every bound (each comparison with it is false), and `--shutdown-grace
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


def field_option(found: dataclasses.Field, annotation, **more: Any):
    """The click option of one field (`more`: what click alone needs, such as an eager callback)."""
    meta, default = found.metadata, _default(found)
    settings = _kind(_bare(annotation), found)
    # Shown unless empty or off; by identity, as 0 == False and a default of 0 is shown (make-tiny --seed).
    if not any(default is empty for empty in (None, False)) and default != () and not meta.get("required"):
        settings.update(default=default, show_default=True)
    elif settings.get("is_flag") and default is None:  # unset unless given, so the config file's value stands
        settings["default"] = None
    settings.update({key: meta[key] for key in PASSED if key in meta})
    return click.option(flag(found), found.name, cls=FieldOption, field=found, help=help_text(found),
                        **{**settings, **more})


def option_fields(settings: type, *names: str) -> list[dataclasses.Field]:
    """The fields of `settings` that are options, in the order of `names` (all of them, in theirs, without)."""
    found = {each.name: each for each in dataclasses.fields(settings) if "help" in each.metadata}
    return [found[name] for name in names] if names else list(found.values())


def field_options(settings: type, *names: str) -> list:
    """The click options of `settings`' option fields (those of `names`, in that order; all, without)."""
    hints = typing.get_type_hints(settings)
    return [field_option(found, hints[found.name]) for found in option_fields(settings, *names)]
