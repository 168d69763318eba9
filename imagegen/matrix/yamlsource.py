"""Load YAML while remembering the line of every key, so errors can point at it.

A key written twice in one mapping is an error naming both lines: PyYAML keeps the later value
without a word, so two `repository:` lines would otherwise pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from imagegen.core.errors import MatrixError, Problem

Path = tuple  # a key path such as ("images", 2, "torch")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: ten times faster


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
    located.data = _convert(node, (), located, twice)
    if twice:
        raise MatrixError(twice)
    return located


def _convert(node: yaml.Node, path: Path, located: Located, twice: list[Problem]) -> object:
    located.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node)
            child = (*path, key)
            line = key_node.start_mark.line + 1
            if child in located.lines and key in result:
                twice.append(Problem(located.file, line, format_path(child), f"written twice, on lines "
                                     f"{located.lines[child]} and {line}: YAML would keep the second silently; "
                                     "keep one", "duplicate-key"))
            located.lines[child] = line
            result[key] = _convert(value_node, child, located, twice)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), located, twice) for i, item in enumerate(node.value)]
    return _scalar(node)


def _scalar(node: yaml.Node) -> object:
    if not isinstance(node, yaml.ScalarNode):
        # Complex keys are not part of our format; keep them visible in errors.
        return str(node)
    return yaml.SafeLoader(" ").construct_object(node, deep=True)
