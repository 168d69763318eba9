"""imagegen reads the inventory program and the check runner from the contract distribution it is installed with
(imagegen_contract), which every image installs from the same source: nothing is loaded from the trainer by path."""

import ast
import json
import subprocess
import sys

from imagegen.stages import inventory
from tests.helpers import REPO

CONTRACT = REPO / "contract/src/imagegen_contract"


def standard_library_only(path):
    tree = ast.parse(path.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return imported - set(sys.stdlib_module_names) - {"__future__"}


def test_the_program_is_the_contracts_inventory_module_and_runs_as_text_anywhere(tmp_path):
    """`imagegen test` runs it with `python -c` in an image that may hold neither imagegen nor the contract."""
    assert inventory.program() == (CONTRACT / "inventory.py").read_text()
    found = subprocess.run([sys.executable, "-I", "-c", inventory.program()], capture_output=True, text=True,
                           cwd=tmp_path, check=True)
    assert json.loads(found.stdout)["python"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")


def test_the_check_runner_is_the_contracts_and_both_programs_hold_only_the_standard_library():
    """They run inside images whose other packages cannot import (QEMU, a broken stack)."""
    assert inventory.runner().__file__ == str(CONTRACT / "checkrunner.py")
    for name in ("inventory.py", "checkrunner.py"):
        assert not standard_library_only(CONTRACT / name), name


def test_no_module_of_the_trainer_is_loaded_by_path():
    """imagegen imports the contract; it does not read or execute the trainer's files (issue 54)."""
    for path in (REPO / "imagegen").rglob("*.py"):
        text = path.read_text()
        assert "spec_from_file_location" not in text and "SourceFileLoader" not in text, path


def test_every_contract_module_is_python_3_8():
    """The contract runs in images whose Python may be 3.8 (the oldest the inventory program supports): its syntax
    parses as 3.8's, and annotations stay strings (`X | None` and `dict[...]` would fail there when evaluated)."""
    for path in sorted(CONTRACT.glob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        futures = {alias.name for node in body if isinstance(node, ast.ImportFrom) and node.module == "__future__"
                   for alias in node.names}
        annotated = any(getattr(node, "returns", None) or isinstance(node, ast.AnnAssign) or
                        (isinstance(node, ast.arg) and node.annotation) for node in ast.walk(tree))
        assert "annotations" in futures or not annotated, path.name
