"""Reading the rows of a data file: JSONL line by line, a JSON list item by item, each row with the line it starts
on. Cost is linear in the file: the line of each row is counted from the previous row's position, never from the
start (a 120k-row JSON list once took over 12 minutes that way), and `ReadCost.chars_scanned` counts what was
scanned so a test can prove the growth without timing it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator, Optional

Record = tuple[int, Any, Optional[str]]  # (line number, record, parse error)
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass
class ReadCost:
    """Characters the reader scanned on its own (outside the JSON decoder) to find rows and count lines."""

    chars_scanned: int = 0


def read_records(path: str, cost: Optional[ReadCost] = None) -> Iterator[Record]:
    """(line number, record, parse error) for every row of a JSONL file or a JSON list."""
    cost = cost if cost is not None else ReadCost()
    if path.endswith(".jsonl"):
        yield from _read_jsonl(path, cost)
        return
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    yield from read_json_list(text, cost)


def _read_jsonl(path: str, cost: ReadCost) -> Iterator[Record]:
    with open(path, encoding="utf-8", newline=None) as handle:  # streamed: memory holds one line at a time
        for number, line in enumerate(handle, start=1):
            cost.chars_scanned += len(line)
            if line.strip():
                try:
                    yield number, json.loads(line), None
                except ValueError as exc:
                    yield number, None, f"invalid JSON ({exc})"


class _Lines:
    """The line number of a position, counted incrementally: positions must not go backwards."""

    def __init__(self, text: str, cost: ReadCost):
        self.text, self.cost = text, cost
        self.position, self.line = 0, 1

    def at(self, position: int) -> int:
        self.line += self.text.count("\n", self.position, position)
        self.cost.chars_scanned += position - self.position
        self.position = position
        return self.line


def read_json_list(text: str, cost: Optional[ReadCost] = None) -> Iterator[Record]:
    """Decode a JSON list item by item so each row keeps the line it starts on."""
    cost = cost if cost is not None else ReadCost()
    decoder, lines = json.JSONDecoder(), _Lines(text, cost)
    position = _skip(text, 0)
    if position >= len(text) or text[position] != "[":
        yield 1, None, "expected a JSON list of rows"
        return
    position = _skip(text, position + 1)
    while position < len(text) and text[position] != "]":
        line = lines.at(position)
        try:
            record, position = decoder.raw_decode(text, position)
        except ValueError as exc:
            yield line, None, f"invalid JSON ({exc})"
            return
        yield line, record, None
        position = _skip(text, position)
        if position < len(text) and text[position] == ",":
            position = _skip(text, position + 1)
    lines.at(len(text))


def _skip(text: str, position: int) -> int:
    return _JSON_SPACE.match(text, position).end()
