"""Load YAML while remembering the line of every key, so errors can point at it.

A key written twice in one mapping is an error naming both lines: PyYAML keeps the later value
without a word, so two `repository:` lines would otherwise pass. Every YAML file imagegen reads is read
here, bounded: nesting deeper than MAX_DEPTH levels, aliases that would add more than MAX_ALIASED nodes
(a kilobyte "billion laughs" expands to a billion) and an alias inside its own anchor are refused from the
parser's events, before anything is built; a file that is not UTF-8 is one problem with its line. (The
trainer, its own distribution, reads its YAML with the same rules in vlmgrpo.config.yamlfile.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path as FilePath

import yaml

from imagegen.core.errors import MatrixError, Problem

Path = tuple  # a key path such as ("images", 2, "torch")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ten times faster
MAX_DEPTH = 100  # nesting levels: the matrix has 7
MAX_ALIASED = 10_000  # nodes all aliases of a file may add together: a few anchors reused pass, an exponential fails
# What YAML refuses in a stream (PyYAML's reader: yaml/reader.py NON_PRINTABLE), found here with its line: the parser's
# own error carries no line, and was reported at line 1.
NON_PRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]")


@dataclass
class Located:
    """Parsed YAML data plus the 1-based line of each key path."""

    data: object
    file: str
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int:
        """The line of `path`, or of its nearest ancestor that has one."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    def problem(self, path: Path, message: str, rule: str) -> Problem:
        return Problem(self.file, self.line_of(path), format_path(path), message, rule)


def format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def read(path: FilePath) -> str:
    """A YAML file's text; a file that is not UTF-8 is one problem at the line of its first bad byte (OSError
    passes to the caller, which says what the file is for)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise MatrixError([Problem(str(path), line, "(encoding)", f"not UTF-8: byte 0x{data[exc.start]:02x} at "
                                   f"column {column}; save the file as UTF-8", "yaml")]) from None


def load(text: str, file: str) -> Located:
    bad = NON_PRINTABLE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise MatrixError([Problem(file, line, "(syntax)", f"character U+{ord(bad.group()):04X} at column {column} "
                                   "is not allowed in YAML; remove it", "yaml")])
    try:
        _check_bounds(text, file)
        node = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        reason = getattr(exc, "problem", None) or str(exc)
        raise MatrixError([Problem(file, line, "(syntax)", f"not valid YAML: {reason}", "yaml")]) from None
    located = Located(data=None, file=file)
    if node is None:
        located.data = {}
        return located
    twice: list[Problem] = []
    located.data = _convert(node, (), located, twice, yaml.SafeLoader(""))
    if twice:
        raise MatrixError(twice)
    return located


def _check_bounds(text: str, file: str) -> None:
    """Walk the parser's events, which cost nothing however the aliases expand: each open collection's anchor and
    node count, each anchor's size once closed (None while open), and what the aliases add in all."""
    open_nodes: list[list] = []  # [anchor, nodes so far] per open collection
    sizes: dict[str, int | None] = {}
    aliased = 0
    for event in yaml.parse(text, Loader=LOADER):
        line = event.start_mark.line + 1
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if len(open_nodes) == MAX_DEPTH:
                raise _bound(file, line, "(nesting)", f"nested deeper than {MAX_DEPTH} levels")
            sizes.update({event.anchor: None} if event.anchor else {})
            open_nodes.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_nodes.pop()
        elif isinstance(event, yaml.AliasEvent):
            size = sizes.get(event.anchor, 1)
            if size is None:
                raise _bound(file, line, "(aliases)", f"the alias *{event.anchor} stands inside its own anchor")
            anchor, aliased = None, aliased + size
            if aliased > MAX_ALIASED:
                raise _bound(file, line, "(aliases)", f"aliases expand to more than {MAX_ALIASED:,} nodes "
                             f"(*{event.anchor} alone is {size:,}); write the values out")
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        else:
            continue
        sizes.update({anchor: size} if anchor else {})
        if open_nodes:
            open_nodes[-1][1] += size


def _bound(file: str, line: int, key: str, message: str) -> MatrixError:
    return MatrixError([Problem(file, line, key, message, "yaml")])


def _convert(node: yaml.Node, path: Path, located: Located, twice: list[Problem], constructor) -> object:
    """The node as plain data; constructor: one PyYAML SafeLoader for the whole file (one made for every scalar took
    a 6 MB matrix 31 s and 1.56 GB)."""
    located.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node, constructor)
            child = (*path, key)
            line = key_node.start_mark.line + 1
            if child in located.lines and key in result:
                twice.append(Problem(located.file, line, format_path(child), f"written twice, on lines "
                                     f"{located.lines[child]} and {line}: YAML would keep the second silently; "
                                     "keep one", "duplicate-key"))
            located.lines[child] = line
            result[key] = _convert(value_node, child, located, twice, constructor)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), located, twice, constructor) for i, item in enumerate(node.value)]
    return _scalar(node, constructor)


def _scalar(node: yaml.Node, constructor) -> object:
    if not isinstance(node, yaml.ScalarNode):
        # Complex keys are not part of our format; keep them visible in errors.
        return str(node)
    value = constructor.construct_object(node, deep=True)
    constructor.constructed_objects.clear()  # a scalar is built once: nothing to remember for the next
    return value
