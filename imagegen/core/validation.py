"""Validation through pydantic, with errors in imagegen's words: one (path, message, rule) per problem.

The matrix schema and the report readers describe their shapes as pydantic models; this module holds
the scalar types they share (each with the message a user reads when a value does not fit) and turns
a pydantic ValidationError into plain (path, message, rule) triples. Callers add the file and line.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Callable, Iterator

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

Path = tuple  # a key path such as ("images", 2, "torch")


class Strict(BaseModel):
    """A mapping with exactly these keys."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def describe(cls) -> str:
        return "a mapping with keys " + ", ".join(cls.keys())

    @classmethod
    def keys(cls) -> list[str]:
        """The keys as written in the file (a field's alias where it has one)."""
        return [field.alias or name for name, field in cls.model_fields.items()]


def show(value: Any) -> str:
    """A value as an error message names it."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}"


def fail(rule: str, message: str) -> typing.NoReturn:
    # Braces would be read as pydantic's message placeholders.
    raise PydanticCustomError(rule, message.replace("{", "{{").replace("}", "}}"))


def _check(test: Callable[[Any], bool], expected: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not test(value):
            fail("type", f"expected {expected}, got {show(value)}")
        return value
    return check


def _version(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        fail("type", f"version {value!r} was read as a number; quote it (for example \"{value}\") so that 3.10 "
                     "does not become 3.1")
    if not isinstance(value, str):
        fail("type", f"expected a quoted version string such as \"12.4\", got {show(value)}")
    return value


def choice(*allowed: str) -> Any:
    """A string among `allowed`."""
    def check(value: Any) -> Any:
        if not isinstance(value, str):
            fail("type", f"expected one of {', '.join(allowed)}, got {show(value)}")
        if value not in allowed:
            fail("choice", f"{value!r} is not allowed; expected one of {', '.join(allowed)}")
        return value
    return Annotated[str, BeforeValidator(check)]


def matching(pattern: str, rule: str, explain: str) -> Any:
    """A string that fully matches `pattern`; `explain` says what is allowed."""
    compiled = re.compile(pattern)

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            fail("type", f"expected a string, got {show(value)}")
        if not compiled.fullmatch(value):
            fail(rule, f"{value!r} {explain}")
        return value
    return Annotated[str, BeforeValidator(check)]


VERSION = Annotated[str, BeforeValidator(_version)]
STR = Annotated[str, BeforeValidator(_check(lambda v: isinstance(v, str), "a string"))]
INT = Annotated[int, BeforeValidator(_check(lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"))]
BOOL = Annotated[bool, BeforeValidator(_check(lambda v: isinstance(v, bool), "true or false"))]


def _quoted_key(value: Any) -> Any:
    if not isinstance(value, str):
        fail("type", f"key {value!r} must be a quoted string (write \"{value}\")")
    return value


KEY = Annotated[str, BeforeValidator(_quoted_key)]


def problems(error: ValidationError, root: type) -> Iterator[tuple[Path, str, str]]:
    """(path, message, rule) for each error pydantic found validating data against `root`."""
    for found in error.errors():
        path = tuple(part for part in found["loc"] if part != "[key]" and not _is_tag(part))
        kind = found["type"]
        if kind == "extra_forbidden":
            allowed = ", ".join(_fields_at(root, found["loc"][:-1]))
            yield path, f"unknown key {path[-1]!r}; allowed keys: {allowed}", "unknown-key"
        elif kind == "missing":
            yield path[:-1], f"missing required key {path[-1]!r}", "required-key"
        elif kind in ("model_type", "model_attributes_type", "dataclass_type"):
            expected = _model_at(root, found["loc"])
            described = expected.describe() if expected is not None else "a mapping"
            yield path, f"expected {described}, got {show(found['input'])}", "type"
        elif kind in ("dict_type", "list_type"):
            expected = "a mapping" if kind == "dict_type" else "a list"
            yield path, f"expected {expected}, got {show(found['input'])}", "type"
        elif kind in _OURS or "-" in kind:
            yield path, found["msg"], kind
        else:
            yield path, found["msg"], "type"


_OURS = ("type", "choice", "name", "size")
TAG_PREFIX = "="  # discriminated unions in our schemas tag their members "=...", dropped from paths


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and part.startswith(TAG_PREFIX)


def _unwrap(hint: Any) -> Any:
    while True:
        origin = typing.get_origin(hint)
        if origin is Annotated:
            hint = typing.get_args(hint)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(hint) if a is not type(None)]
            if len(members) != 1:
                return hint
            hint = members[0]
        else:
            return hint


def _member(hint: Any, tag: str) -> Any:
    """The member of a tagged union that carries `tag`."""
    for member in typing.get_args(_unwrap(hint)):
        for meta in getattr(member, "__metadata__", ()):
            if getattr(meta, "tag", None) == tag:
                return member
    return Any


def _hint_at(root: type, loc: tuple) -> Any:
    hint: Any = root
    for part in loc:
        if _is_tag(part):
            hint = _member(hint, part)
            continue
        hint = _unwrap(hint)
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            fields = [f for name, f in hint.model_fields.items() if part in (name, f.alias)]
            hint = _annotated(fields[0]) if fields else Any
        elif typing.get_origin(hint) is dict:
            hint = typing.get_args(hint)[1] if part != "[key]" else Any
        elif typing.get_origin(hint) is list:
            hint = typing.get_args(hint)[0]
        else:
            return Any
    return hint


def _annotated(field: Any) -> Any:
    """A field's type with the Annotated metadata pydantic keeps apart (a discriminated union's tags)."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _model_at(root: type, loc: tuple) -> type | None:
    hint = _unwrap(_hint_at(root, loc))
    return hint if isinstance(hint, type) and issubclass(hint, Strict) else None


def _fields_at(root: type, loc: tuple) -> list[str]:
    model = _model_at(root, loc)
    return model.keys() if model is not None else []
