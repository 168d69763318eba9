"""The line of a key path in JSON text, so that a problem in a JSON file (a lock) can point at it as a problem in
the matrix does: ("platforms", "linux/amd64", "packages", 3, "version") is on the line its value starts on.

Only read when there is a problem to report: it decodes the values it passes over, nothing is kept.
"""

from __future__ import annotations

import json
import re

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def line_of(text: str, path: tuple) -> int:
    """The 1-based line where the value at `path` (object keys and array indexes) starts; where its nearest ancestor
    that is there starts when it is not; 1 for text that is not JSON up to there."""
    position = _skip(text, 0)
    try:
        for part in path:
            found = _child(text, position, part)
            if found is None:
                break
            position = found
    except (ValueError, IndexError):
        pass
    return text.count("\n", 0, position) + 1


def _child(text: str, position: int, part) -> int | None:
    """Where the value of key `part` of the object at `position` (or item `part` of the array there) starts."""
    opening = text[position]
    if (opening, isinstance(part, int)) not in (("{", False), ("[", True)):
        return None
    position, number = _skip(text, position + 1), 0
    while text[position] not in "]}":
        if opening == "{":
            key, position = json.decoder.scanstring(text, position + 1)
            position = _skip(text, _skip(text, position) + 1)  # past the colon
            if key == part:
                return position
        elif number == part:
            return position
        _, position = _DECODER.raw_decode(text, position)
        position = _skip(text, position)
        position, number = _skip(text, position + 1) if text[position] == "," else position, number + 1
    return None


def _skip(text: str, position: int) -> int:
    return _SPACE.match(text, position).end()
