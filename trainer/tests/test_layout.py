"""The package's shape: small modules, short functions, no import cycle, and a command line that starts without trl."""

import ast
import subprocess
import sys
from pathlib import Path

import vlmgrpo
from conftest import ENV

PACKAGE = Path(vlmgrpo.__file__).parent
MAX_MODULE_LINES = 400  # a module is under this
MAX_FUNCTION_LINES = 50  # from `def` to the last line of its body


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = (path, ast.parse(path.read_text()))
    return found


def imported(name: str, path: Path, tree: ast.Module) -> set[str]:
    """The vlmgrpo modules `name` imports anywhere in its text (at module level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
    return targets


def test_modules_are_under_400_lines_and_functions_at_most_50():
    long_modules, long_functions = [], []
    for name, (path, tree) in modules().items():
        lines = len(path.read_text().splitlines())
        if lines >= MAX_MODULE_LINES:
            long_modules.append(f"{name}: {lines} lines")
        long_functions += [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(tree)
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long_modules and not long_functions, long_modules + long_functions


def test_no_import_cycle_inside_vlmgrpo():
    found = modules()
    graph = {name: {target for target in imported(name, *found[name]) if target in found and target != name}
             for name in found}
    cycles, state = [], {}

    def visit(name, path):
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


def test_the_command_line_starts_without_trl_or_torch():
    """`vlmgrpo info`, `selftest` and `make-tiny` must start where trl is broken or absent; training commands
    import it after their signal handler is in place."""
    code = "import sys, vlmgrpo.cli; print(sorted({'trl', 'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr[-2000:]
