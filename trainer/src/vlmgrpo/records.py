"""Reading the rows of a data file: JSONL line by line, a JSON list item by item, each row with the line it starts
on. Cost is linear in the file: the line of each row is counted from the previous row's position, never from the
start (which made the cost quadratic in the rows; bench section 8 reads 120k); a JSON list is read a chunk at a time
and JSONL a line at a time, so memory holds the rows kept and about one chunk. `ReadCost` counts what was scanned and held, so a
test can prove both without timing anything.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

Record = tuple[int, Any, Optional[str]]  # (line number, record, parse error)
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
CHUNK = 1 << 20  # characters read at a time from a JSON list
# A byte that is not UTF-8, as errors="surrogateescape" reads it: the file is read whole, and each such byte is an
# error at the line and column of the row that holds it, not a traceback.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _not_utf8(found: re.Match, column: int) -> str:
    return (f"not UTF-8: byte 0x{ord(found.group()) - 0xdc00:02x} at column {column}; save the file as UTF-8")


@dataclass
class ReadCost:
    """Characters the reader scanned on its own (outside the JSON decoder) to find rows and count lines."""

    chars_scanned: int = 0
    largest_window: int = 0  # the most characters of a JSON list held at once


def read_records(path: str, cost: Optional[ReadCost] = None) -> Iterator[Record]:
    """(line number, record, parse error) for every row of a JSONL file or a JSON list."""
    cost = cost if cost is not None else ReadCost()
    if path.endswith(".jsonl"):
        yield from _read_jsonl(path, cost)
        return
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        yield from read_json_list(handle.read, cost)


def _read_jsonl(path: str, cost: ReadCost) -> Iterator[Record]:
    with open(path, encoding="utf-8", errors="surrogateescape", newline=None) as handle:  # a line at a time
        for number, line in enumerate(handle, start=1):
            cost.chars_scanned += len(line)
            bad = _NOT_UTF8.search(line)
            if bad:
                yield number, None, _not_utf8(bad, bad.start() + 1)
            elif line.strip():
                try:
                    yield number, json.loads(line), None
                except ValueError as exc:
                    yield number, None, f"invalid JSON ({exc})"


class _Window:
    """The part of a JSON list not decoded yet: read a chunk at a time, and what was decoded is dropped, so memory
    holds about one chunk besides the rows kept. Lines are counted as the position moves forward."""

    def __init__(self, read: Callable[[int], str], cost: ReadCost, chunk: int):
        self.read, self.cost, self.chunk = read, cost, chunk
        self.text, self.position, self.counted, self.line, self.eof = "", 0, 0, 1, False

    def line_here(self) -> int:
        self.line += self.text.count("\n", self.counted, self.position)
        self.cost.chars_scanned += self.position - self.counted
        self.counted = self.position
        return self.line

    def more(self) -> bool:
        """Read the next chunk (as large as the window when a row spans it); False at the end of the file."""
        piece = "" if self.eof else self.read(max(self.chunk, len(self.text) - self.position))
        if not piece:
            self.eof = True
            return False
        self.line_here()
        self.text, self.counted, self.position = self.text[self.position:] + piece, 0, 0
        self.cost.largest_window = max(self.cost.largest_window, len(self.text))
        return True

    def peek(self) -> str:
        """The next character that is not JSON whitespace, or "" at the end."""
        while True:
            self.position = _JSON_SPACE.match(self.text, self.position).end()
            if self.position < len(self.text) or not self.more():
                return self.text[self.position:self.position + 1]

    def decode(self, decoder: json.JSONDecoder) -> tuple[Any, Optional[tuple[int, str]]]:
        """The next value, and (lines into it, why) where its text is not UTF-8 (None when it is)."""
        while True:
            start = self.position
            try:
                record, end = decoder.raw_decode(self.text, start)
                if end < len(self.text) or self.eof:  # a value that ends with the window may go on (a number)
                    self.position = end
                    bad = _NOT_UTF8.search(self.text, start, end)
                    if bad is None:
                        return record, None
                    line_start = self.text.rfind("\n", 0, bad.start()) + 1
                    lines = self.text.count("\n", start, bad.start())
                    return record, (lines, _not_utf8(bad, bad.start() - line_start + 1))
            except ValueError:
                if self.eof:
                    raise
            self.more()


def read_json_list(text_or_read, cost: Optional[ReadCost] = None, chunk: int = CHUNK) -> Iterator[Record]:
    """Decode a JSON list item by item so each row keeps the line it starts on; text, or a file's read method."""
    cost = cost if cost is not None else ReadCost()
    read = io.StringIO(text_or_read).read if isinstance(text_or_read, str) else text_or_read
    window, decoder = _Window(read, cost, chunk), json.JSONDecoder()
    if window.peek() != "[":
        yield 1, None, "expected a JSON list of rows"
        return
    window.position += 1
    while window.peek() not in ("]", ""):
        line = window.line_here()
        try:
            record, bad = window.decode(decoder)
        except ValueError as exc:
            yield line, None, f"invalid JSON ({exc})"
            return
        yield (line, record, None) if bad is None else (line + bad[0], None, bad[1])
        if window.peek() == ",":
            window.position += 1
        elif window.peek() not in ("]", ""):
            yield window.line_here(), None, "expected ',' or ']' after the row before"
            return
    if window.peek() == "":  # a copy cut short after a whole row reads as a shorter list: refuse it
        yield window.line_here(), None, "the JSON list ends before its closing ']': the file is cut short"
        return
    window.position += 1
    if window.peek() != "":
        yield window.line_here(), None, "text after the JSON list's closing ']'"
        return
    window.line_here()
