"""Load YAML while remembering the line of every key, so errors can point at it."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from imagegen.core.errors import MatrixError, Problem

Path = tuple  # a key path such as ("images", 2, "torch")


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


def load(text: str, file: str) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        reason = getattr(exc, "problem", None) or str(exc)
        raise MatrixError([Problem(file, line, "(syntax)", f"not valid YAML: {reason}", "yaml")]) from None
    located = Located(data=None, file=file)
    if node is None:
        located.data = {}
        return located
    located.data = _convert(node, (), located.lines)
    return located


def _convert(node: yaml.Node, path: Path, lines: dict[Path, int]) -> object:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            child = (*path, key)
            lines[child] = key_node.start_mark.line + 1
            result[key] = _convert(value_node, child, lines)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), lines) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> object:
    if not isinstance(node, yaml.ScalarNode):
        # Complex keys are not part of our format; keep them visible in errors.
        return str(node)
    return yaml.SafeLoader(" ").construct_object(node, deep=True)
