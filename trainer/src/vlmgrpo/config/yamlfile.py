"""The one YAML reader of the trainer: run configs, `--set` values and dataset mixture files.

PyYAML reads 1e-6 (no dot) as a string, as YAML 1.1 says; YAML 1.2 and every user mean a number, so it is one here.
A key written twice in one mapping is refused: YAML would keep the second silently (learning_rate 1e-6, then 0.5).
And it is bounded, with the rules imagegen's matrix reader has (imagegen.matrix.yamlsource; the trainer is its own
distribution and imports nothing of imagegen): nesting deeper than MAX_DEPTH levels, aliases that would add more
than MAX_ALIASED nodes (a kilobyte "billion laughs" is a billion) and an alias inside its own anchor are refused
while the file is composed, before a value is built or checked; a file that is not UTF-8 is one line with its line.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 100  # nesting levels: a run config has 2
MAX_ALIASED = 10_000  # nodes all aliases of a file may add together


class YamlRefused(yaml.YAMLError):
    """YAML PyYAML would read and this loader does not, at a line."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class YamlFileError(Exception):
    """A YAML file that cannot be read: one line, `FILE[:LINE]: problem`."""


class YamlLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self.depth, self.aliased = 0, 0
        self.open_anchors: set[str] = set()
        self.sizes: dict[int, int] = {}  # id(node) -> its node count, aliases expanded

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise YamlRefused(line, f"the alias *{event.anchor} stands inside its own anchor")
            if event.anchor in self.anchors:
                size = self._size(self.anchors[event.anchor])
                self.aliased += size
                if self.aliased > MAX_ALIASED:
                    raise YamlRefused(line, f"aliases expand to more than {MAX_ALIASED:,} nodes (*{event.anchor} "
                                            f"alone is {size:,}); write the values out")
            return super().compose_node(parent, index)
        if not isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            return super().compose_node(parent, index)
        if self.depth == MAX_DEPTH:
            raise YamlRefused(line, f"nested deeper than {MAX_DEPTH} levels")
        self.depth += 1
        self.open_anchors |= {event.anchor} if event.anchor else set()
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(event.anchor)

    def _size(self, node) -> int:
        if id(node) not in self.sizes:
            children = node.value if isinstance(node, yaml.SequenceNode) else (
                [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else [])
            self.sizes[id(node)] = 1 + sum(self._size(child) for child in children)
        return self.sizes[id(node)]

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if isinstance(key, typing.Hashable) and key in seen:
                raise YamlRefused(line, f"key {key!r}: written twice, on lines {seen[key]} and {line}: YAML "
                                        "would keep the second silently; keep one")
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
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlFileError(f"{path}:{line}: not UTF-8: byte 0x{data[exc.start]:02x} at column {column}; save the "
                            "file as UTF-8") from None
    try:
        return load_yaml(text)
    except YamlRefused as exc:
        raise YamlFileError(f"{path}:{exc.line}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise YamlFileError(f"{where}: not valid YAML: {str(exc).splitlines()[0]}") from None
