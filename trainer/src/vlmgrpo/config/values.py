"""Whether a value from YAML or `--set` fits a config field's type, checked by pydantic in strict mode.

A field's type hint is first rewritten into the form a YAML value takes: an enum becomes the literal of its members'
values (YAML gives "cosine", not SchedulerType.COSINE), "SchedulerType | str" means a SchedulerType name (not any
string), a dict is any mapping (its values are left to TRL), and a class YAML cannot spell (ParallelismConfig, ...) is
passed through to the TRL config's own validation. Strict mode accepts an int where a float is expected, and never a
bool as a number or a number as a string.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from typing import Any, Literal, Union

from vlmgrpo.errors import ConfigError

_UNIONS = (Union, types.UnionType)
_PLAIN = (bool, int, float, str, type(None))
# JSON schema types (what pydantic describes a type as) under the names users see in Python and YAML.
_TYPE_NAMES = {"boolean": "bool", "integer": "int", "number": "float", "string": "str", "null": "null",
               "object": "dict", "array": "list"}


def _is_enum(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def as_written(hint):
    """The type of the values YAML and `--set` produce for a field of this type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        has_enum = any(_is_enum(arg) for arg in args)
        return Union[tuple(as_written(arg) for arg in args if not (arg is str and has_enum))]
    if origin is Literal or hint is Any or hint in _PLAIN:
        return hint
    if _is_enum(hint):
        return Literal[tuple(member.value for member in hint)]
    if origin is list or hint is list:
        return list[as_written(args[0])] if args else list
    if origin is dict or hint is dict:
        return dict
    return Any  # a class YAML cannot spell: the TRL config validates it


@functools.lru_cache(maxsize=None)
def _adapter(hint):
    # pydantic is imported here, not at the top: the data and model code reach this module through config/load.py, and
    # trainer/scripts/verify_gpu.py runs that code on GPU machines that carry only torch, transformers and TRL.
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(as_written(hint), config=ConfigDict(strict=True))


def _describe(schema: dict) -> str:
    if "anyOf" in schema:
        return " or ".join(_describe(member) for member in schema["anyOf"])
    if "enum" in schema or "const" in schema:
        return "one of " + ", ".join(str(value) for value in schema.get("enum", [schema.get("const")]))
    kind = schema.get("type")
    if kind == "array" and schema.get("items"):
        return f"list of {_describe(schema['items'])}"
    return _TYPE_NAMES.get(kind, "any value")


def describe(hint) -> str:
    """The type as the error message names it: float, one of linear, cosine, ..., list of str or null."""
    return _describe(_adapter(hint).json_schema())


def check_value(source: str, key: str, value, hint) -> None:
    from pydantic import ValidationError

    try:
        _adapter(hint).validate_python(value)
    except ValidationError:
        raise ConfigError(f"{source}: key '{key}': {value!r} is not valid, expected {describe(hint)}") from None
