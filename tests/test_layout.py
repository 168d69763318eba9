"""The shape of the code: imagegen's packages import only downward, no package imports itself in a circle,
no module is over 400 lines and no function over 50.

imagegen's layers, lowest first. A module may import its own layer and the ones below it, never one above:
core (errors, sizes, platforms, validation); engine (the edges: BuildKit, containers, the
registry); matrix (the matrix model, its rules, planned images); locking (index, resolve, the lock format);
facts (the matrix's facts against the index); render (contexts, locked images, tags); workspace (where the inputs
are, and the plan they make); stages (build, checks, sbom, publish); reports (listing, the report page); cli.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import REPO

LAYERS = ("core", "engine", "matrix", "locking", "facts", "render", "workspace", "stages", "reports", "cli")
OWN_CODE = ("imagegen", "contract/src", "trainer/src", "trainer/scripts", "bench", "tests", "trainer/tests")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


def modules(package_root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of a package."""
    found = {}
    for path in sorted(package_root.rglob("*.py")):
        parts = path.relative_to(package_root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, module: str, is_package: bool) -> set[str]:
    """Every module `path` imports (at any depth of its code), resolved to dotted names."""
    found = set()
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            start = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*start, *([node.module] if node.module else [])])
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def graph(package_root: Path, package: str) -> dict[str, set[str]]:
    known = modules(package_root, package)
    edges = {}
    for name, path in known.items():
        targets = imports(path, name, path.name == "__init__.py")
        edges[name] = {t for t in targets if t in known and t != name}
    return edges


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("__main__",):
        return len(LAYERS)  # imagegen, imagegen.__main__: the top
    return LAYERS.index(parts[1])


def test_imagegen_imports_only_downward():
    upward = [f"{module} ({LAYERS[layer(module)] if layer(module) < len(LAYERS) else 'top'}) imports {target} "
              f"({LAYERS[layer(target)]})"
              for module, targets in graph(REPO / "imagegen", "imagegen").items() for target in sorted(targets)
              if layer(target) > layer(module)]
    assert not upward, "\n".join(upward)


def test_every_imagegen_package_says_its_job_and_what_it_may_import():
    for name in LAYERS:
        path = REPO / "imagegen" / name / "__init__.py"
        if not path.exists():
            path = REPO / "imagegen" / f"{name}.py"
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(docstring) > 80 and "import" in docstring, f"{path}: say the package's job and its imports"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("root, package", [("imagegen", "imagegen"), ("trainer/src/vlmgrpo", "vlmgrpo")])
def test_no_import_cycle(root, package):
    found = cycles(graph(REPO / root, package))
    assert not found, f"modules that import each other in a circle: {found}"


# The trainer's subpackages in the order of its flow, lowest first: a module may import its own subpackage and the
# ones before it. The top-level modules (errors, boxes, access, records, processes) are the leaves below them
# all. The image's own side (its driver check, environment, checks, info, selftest, lab) is `image`; what imagegen
# reads of an image is the contract's (contract/src/imagegen_contract).
TRAINER_LAYERS = ("rewards", "config", "data", "models", "fa4kernels", "monitoring", "launch", "training", "evaluation",
                  "serving", "image", "commands")


def trainer_layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # vlmgrpo itself: its __version__
    if parts[1] == "__main__":
        return len(TRAINER_LAYERS) + 1
    name = parts[1]
    return TRAINER_LAYERS.index(name) + 1 if name in TRAINER_LAYERS else 0


def test_the_trainer_imports_only_downward():
    upward = [f"{module} imports {target}"
              for module, targets in graph(REPO / "trainer/src/vlmgrpo", "vlmgrpo").items() for target in sorted(targets)
              if trainer_layer(target) > trainer_layer(module)]
    assert not upward, "\n".join(upward)


def test_every_trainer_module_is_in_a_subpackage_or_a_known_leaf():
    top = {path.stem for path in (REPO / "trainer/src/vlmgrpo").glob("*.py")} - {"__init__", "__main__"}
    leaves = {"errors", "boxes", "access", "records", "processes"}
    assert top <= leaves, sorted(top)
    for name in TRAINER_LAYERS:
        docstring = ast.get_docstring(ast.parse((REPO / "trainer/src/vlmgrpo" / name / "__init__.py").read_text()))
        assert docstring and "import" in docstring.lower(), f"vlmgrpo.{name}: say the subpackage's job and its imports"


# The trainer's subpackages that are leaves of its flow: what each may import of the rest of vlmgrpo. A reward is
# scored from a completion and a row, so the rewards know nothing of the config, the data reader, the run or the model.
TRAINER_LEAVES = {"vlmgrpo.rewards": {"vlmgrpo.boxes", "vlmgrpo.errors"}}


@pytest.mark.parametrize("subpackage", sorted(TRAINER_LEAVES))
def test_a_trainer_leaf_subpackage_imports_only_what_it_may(subpackage):
    edges = graph(REPO / "trainer/src/vlmgrpo", "vlmgrpo")
    allowed = TRAINER_LEAVES[subpackage]
    outside = {f"{module} imports {target}" for module, targets in edges.items()
               if module == subpackage or module.startswith(subpackage + ".")
               for target in targets if not (target == subpackage or target.startswith(subpackage + "."))
               and target not in allowed and target != "vlmgrpo"}
    assert not outside, sorted(outside)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def own_files():
    return [path for root in OWN_CODE for path in sorted((REPO / root).rglob("*.py"))
            if "fixture" not in path.parts]


def test_the_contract_imports_neither_side():
    """imagegen and the trainer both install the contract: it may import neither (nor would the images' checks run
    where only the contract and the standard library import)."""
    contract = REPO / "contract/src/imagegen_contract"
    for name, path in modules(contract, "imagegen_contract").items():
        outside = {target.split(".")[0] for target in imports(path, name, path.name == "__init__.py")}
        assert not outside & {"imagegen", "vlmgrpo"}, f"{path.relative_to(REPO)} imports {outside}"
    assert not cycles(graph(contract, "imagegen_contract"))


def test_no_module_is_over_400_lines():
    long = [f"{path.relative_to(REPO)}: {lines}" for path in own_files()
            if (lines := path.read_text().count("\n")) > MAX_MODULE_LINES]
    assert not long, "split by job: " + ", ".join(long)


def test_no_function_is_over_50_lines():
    long = []
    for path in own_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)


def test_the_architecture_doc_lists_the_trainer_s_folders_in_their_layer_order():
    doc = " ".join((REPO / "docs" / "architecture.md").read_text().split())
    sentence = re.search(r"The trainer's own modules are folders by job, lowest first .*?\. Each module", doc)
    assert sentence, "docs/architecture.md no longer lists the trainer's folders"
    assert re.findall(r"`(\w+)`", sentence[0].replace("`train`", "").replace("`sft`", "")) == list(TRAINER_LAYERS)
