"""What reading YAML is bounded by, for imagegen (the matrix, and every YAML file it reads) and the trainer (run
configs, `--set` values, dataset mixture files) alike: the same file is refused, with the same words, by either.

Nesting deeper than MAX_DEPTH levels, aliases that would add more than MAX_ALIASED nodes (a kilobyte "billion laughs"
expands to a billion) and an alias inside its own anchor are refused from the parser's events, which cost nothing
however the aliases expand, before anything is built. A file that is not UTF-8 is refused at the line of its first bad
byte. A key written twice in one mapping is refused by both sides in the words of `written_twice`: YAML would keep the
second value silently.

Each refusal is a YamlRefused with its line; each side says it its own way (imagegen as a Problem of its file,
the trainer as one line `FILE:LINE: problem`). Importable on Python 3.8 like the rest of this distribution.
"""

from __future__ import annotations

from typing import Optional, Union

import yaml

MAX_DEPTH = 100  # nesting levels: the matrix has 7, a run config 2
MAX_ALIASED = 10_000  # nodes all aliases of a file may add together: a few anchors reused pass, an exponential fails


class YamlRefused(yaml.YAMLError):
    """YAML that PyYAML would read and these rules do not, at a line; `kind` is what is refused ("encoding",
    "nesting", "aliases", "duplicate-key"), and the message alone is the exception's text."""

    def __init__(self, line: int, kind: str, message: str):
        super().__init__(message)
        self.line = line
        self.kind = kind


def position(data: Union[str, bytes], offset: int) -> tuple[int, int]:
    """The 1-based line and column of `offset` in a file's text or bytes."""
    newline = b"\n" if isinstance(data, bytes) else "\n"
    return data.count(newline, 0, offset) + 1, offset - (data.rfind(newline, 0, offset) + 1) + 1


def decode_utf8(data: bytes) -> str:
    """A YAML file's text; one that is not UTF-8 is refused at the line of its first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = position(data, exc.start)
        raise YamlRefused(line, "encoding", f"not UTF-8: byte 0x{data[exc.start]:02x} at column {column}; save the "
                                            "file as UTF-8") from None


def written_twice(first_line: int, second_line: int) -> str:
    """What a key written twice in one mapping is told."""
    return (f"written twice, on lines {first_line} and {second_line}: YAML would keep the second silently; "
            "keep one")


class StreamBounds:
    """MAX_DEPTH and MAX_ALIASED, checked one parser event at a time (`check`), in the order the parser gives them:
    each open collection's anchor and node count, each anchor's size once closed (None while open), and what the
    aliases add in all."""

    def __init__(self) -> None:
        self.open_nodes: list[list] = []  # [anchor, nodes so far] per open collection
        self.sizes: dict[str, Optional[int]] = {}
        self.aliased = 0

    def check(self, event: yaml.Event) -> None:
        line = event.start_mark.line + 1
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(self.open_nodes) == MAX_DEPTH:
                raise YamlRefused(line, "nesting", f"nested deeper than {MAX_DEPTH} levels")
            self.sizes.update({event.anchor: None} if event.anchor else {})
            self.open_nodes.append([event.anchor, 1])
            return
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = self.open_nodes.pop()
        elif isinstance(event, yaml.AliasEvent):
            size = self.sizes.get(event.anchor, 1)
            if size is None:
                raise YamlRefused(line, "aliases", f"the alias *{event.anchor} stands inside its own anchor")
            anchor, self.aliased = None, self.aliased + size
            if self.aliased > MAX_ALIASED:
                raise YamlRefused(line, "aliases", f"aliases expand to more than {MAX_ALIASED:,} nodes "
                                                   f"(*{event.anchor} alone is {size:,}); write the values out")
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        else:
            return
        self.sizes.update({anchor: size} if anchor else {})
        if self.open_nodes:
            self.open_nodes[-1][1] += size


def check_bounds(text: str, loader: type) -> None:
    """Refuse `text` (YamlRefused) where it breaks a bound, walking all its parser events (`loader`'s parser) before
    anything is composed: for a reader that composes with libyaml, whose composing no Python code can watch."""
    bounds = StreamBounds()
    for event in yaml.parse(text, Loader=loader):
        bounds.check(event)
