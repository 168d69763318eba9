"""imagegen reads the inventory program from the trainer source the images are built from, found as Python imports
vlmgrpo.inventory from that source: the package folders its pyproject.toml names, else src/ and the top."""

import pytest

from imagegen.core.errors import UserError
from imagegen.stages import inventory
from imagegen.workspace import read_trainer
from tests.helpers import REPO

PROGRAM = "import json\nprint(json.dumps({}))\n"


def program(trainer_dir):
    """As `imagegen test` reads it: the folders from the trainer's pyproject.toml, read once by read_trainer."""
    return inventory.program(trainer_dir, read_trainer(trainer_dir).package_folders)


def trainer_tree(root, where, pyproject_where=None):
    package = root / where / "vlmgrpo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inventory.py").write_text(PROGRAM)
    find = f'\n[tool.setuptools.packages.find]\nwhere = ["{pyproject_where}"]\n' if pyproject_where else ""
    (root / "pyproject.toml").write_text(f'[project]\nname = "vlmgrpo"\nversion = "1.0"\n{find}')
    return root


def test_the_repositorys_trainer_gives_its_own_inventory_module():
    assert program(REPO / "trainer") == (REPO / "trainer/src/vlmgrpo/inventory.py").read_text()


def test_the_check_runner_is_loaded_from_the_trainer_source_and_holds_only_the_standard_library():
    """The host's checks run by the trainer's runner, loaded from its file as the inventory program is read: it must
    import nothing imagegen's environment may lack (not vlmgrpo, which imagegen does not install)."""
    import ast
    import sys

    loaded = inventory.runner(REPO / "trainer", read_trainer(REPO / "trainer").package_folders)
    assert loaded.__file__ == str(REPO / "trainer/src/vlmgrpo/checkrunner.py") and loaded.__name__.startswith("imagegen_")
    tree = ast.parse((REPO / "trainer/src/vlmgrpo/checkrunner.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


@pytest.mark.parametrize("where, named", [("src", None), (".", None), ("python", "python")])
def test_the_module_is_found_wherever_the_trainer_keeps_its_packages(tmp_path, where, named):
    assert program(trainer_tree(tmp_path, where, named)) == PROGRAM


def test_a_namespace_package_without_init_is_found_as_python_would(tmp_path):
    trainer_tree(tmp_path, "src")
    (tmp_path / "src/vlmgrpo/__init__.py").unlink()
    assert program(tmp_path) == PROGRAM


def test_a_trainer_without_the_module_is_one_error_naming_it_and_where_it_looked(tmp_path):
    trainer_tree(tmp_path, "python")  # its pyproject does not say python/, so src/ and the top are searched
    with pytest.raises(UserError) as raised:
        program(tmp_path)
    message = str(raised.value)
    assert "no module vlmgrpo.inventory" in message and f"{tmp_path}/src" in message and "--trainer DIR" in message
