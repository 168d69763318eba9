"""The one YAML reader of the trainer: run configs, `--set` values and dataset mixture files.

PyYAML reads 1e-6 (no dot) as a string, as YAML 1.1 says; YAML 1.2 and every user mean a number, so it is one here.
A key written twice in one mapping is refused: YAML would keep the second silently (learning_rate 1e-6, then 0.5).
And it is bounded by the rules imagegen's reader has too (imagegen_contract.yamlfile: nesting, aliases, UTF-8),
checked while the file is composed, before a value is built or checked; each refusal is one line with its line.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml

from imagegen_contract.yamlfile import StreamBounds, YamlRefused, decode_utf8, written_twice


class YamlFileError(Exception):
    """A YAML file that cannot be read: one line, `FILE[:LINE]: problem`."""


class YamlLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.bounds = StreamBounds()

    def get_event(self):
        # Every event the composer takes passes here, in order, and only those: a file is refused at the first
        # event past a bound, before what follows it is parsed.
        event = super().get_event()
        self.bounds.check(event)
        return event

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in seen:
                raise YamlRefused(line, "duplicate-key", f"key {key!r}: {written_twice(seen[key], line)}")
            if isinstance(key, typing.Hashable):
                seen[key] = line
        return super().construct_mapping(node, deep)


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def load_yaml(text: str):
    return yaml.load(text, Loader=YamlLoader)


def read_yaml(path: str, what: str):
    """The YAML of the file at `path` (`what` it is, for the message: "config file"); YamlFileError, one line."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read {what}: {exc.strerror}") from None
    try:
        return load_yaml(decode_utf8(data))
    except YamlRefused as exc:
        raise YamlFileError(f"{path}:{exc.line}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise YamlFileError(f"{where}: not valid YAML: {str(exc).splitlines()[0]}") from None
