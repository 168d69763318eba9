"""Load YAML while remembering the line of every key, so errors can point at it.

Every YAML file imagegen reads is read here, bounded by the rules the trainer's reader has too
(imagegen_contract.yamlfile: nesting, aliases, UTF-8), each refusal one Problem at its line. A key written twice in
one mapping is an error naming both lines: PyYAML keeps the later value without a word, so two `repository:` lines
would otherwise pass; every such key of the file is reported, at its key path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path as FilePath

import yaml

from imagegen_contract.yamlfile import YamlRefused, check_bounds, decode_utf8, position, written_twice
from imagegen.core.errors import MatrixError, Problem

Path = tuple  # a key path such as ("images", 2, "torch")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ten times faster
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
    try:
        return decode_utf8(path.read_bytes())
    except YamlRefused as exc:
        raise _refused(str(path), exc) from None


def load(text: str, file: str) -> Located:
    bad = NON_PRINTABLE.search(text)
    if bad:
        line, column = position(text, bad.start())
        raise MatrixError([Problem(file, line, "(syntax)", f"character U+{ord(bad.group()):04X} at column {column} "
                                   "is not allowed in YAML; remove it", "yaml")])
    try:
        check_bounds(text, LOADER)  # first: _convert writes every alias out in full, however far it expands
        node = yaml.compose(text, Loader=LOADER)
    except YamlRefused as exc:
        raise _refused(file, exc) from None
    except yaml.YAMLError as exc:
        raise _not_yaml(file, exc) from None
    located = Located(data=None, file=file)
    if node is None:
        located.data = {}
        return located
    twice: list[Problem] = []
    try:
        located.data = _convert(node, (), located, twice, yaml.SafeLoader(""))
    except yaml.YAMLError as exc:  # a scalar no safe constructor makes: a merge key (<<), a tag of Python's
        raise _not_yaml(file, exc) from None
    if twice:
        raise MatrixError(twice)
    return located


def _not_yaml(file: str, error: yaml.YAMLError) -> MatrixError:
    mark = getattr(error, "problem_mark", None)
    line = mark.line + 1 if mark else 1
    reason = getattr(error, "problem", None) or str(error)
    return MatrixError([Problem(file, line, "(syntax)", f"not valid YAML: {reason}", "yaml")])


def _refused(file: str, refused: YamlRefused) -> MatrixError:
    """A refusal of the shared rules as imagegen reports it: the problem's key names what was refused."""
    return MatrixError([Problem(file, refused.line, f"({refused.kind})", str(refused), "yaml")])


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
                twice.append(Problem(located.file, line, format_path(child), written_twice(located.lines[child], line),
                                     "duplicate-key"))
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
