"""imagegen_contract.inventory: one JSON object of what an environment holds, read with the standard library only."""

import ast
import json
import os
import platform
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
import torch

from conftest import ENV, fake_distribution
from imagegen_contract import inventory

KEYS = ["python", "distributions", "os", "package_manager", "os_packages", "machines", "versions",
        "version_checks", "expected"]
TEXT = Path(inventory.__file__).read_text()
# Run the file's text with no site-packages and no environment (-S -I), then list every module it imported.
SPY = ("import sys, atexit\nsys.path[:0] = {paths!r}\n"
       "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A distribution with recorded hashes and licence fields, and an expected file naming it and a wheel family."""
    site = tmp_path_factory.mktemp("site")
    fake_distribution(site, "imagegen-fake-lib", "1.2.3",
                      ["License-Expression: MIT", "License: " + "x" * 400,
                       "Classifier: License :: OSI Approved :: MIT License", "Classifier: Programming Language :: C"],
                      {"url": "file:///w.whl", "archive_info": {"hashes": {"sha256": "ab" * 32}}})
    fake_distribution(site, "imagegen-fake-family-cu12", "9.1.0.70")
    expected = site / "expected.json"
    expected.write_text(json.dumps({
        "versions": {"lib": "1.2.3", "transformers": "0.0.1", "absent": None, "family": "9.1.0", "none": None},
        "gpu_count": None, "cuda_archs": [], "driver": None,
        "distributions": {"lib": "imagegen_fake_lib", "transformers": "transformers", "absent": "no-such-dist"},
        "families": {"family": "imagegen-fake-family-cu", "none": "no-such-family-"}}))
    return site


def run_inventory(command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env or ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = result.stdout.splitlines()  # one JSON object
    return json.loads(line), result.stderr


def test_as_a_module_it_prints_the_documented_keys(site):
    found, _ = run_inventory([sys.executable, "-m", "imagegen_contract.inventory", str(site / "expected.json")],
                             env={**ENV, "PYTHONPATH": f"{site}:{ENV.get('PYTHONPATH', '')}"})
    assert list(found) == KEYS
    assert found["python"] == platform.python_version()
    assert found["versions"] == {"lib": "1.2.3", "transformers": metadata.version("transformers"), "absent": None,
                                 "family": "9.1.0.70", "none": None, "python": "%d.%d.%d" % sys.version_info[:3],
                                 "torch_cuda": torch.version.cuda, "vlmgrpo": metadata.version("vlmgrpo")}
    assert {c["name"]: c["status"] for c in found["version_checks"]} == {  # judged inside, by one rule
        "version.lib": "pass", "version.transformers": "fail", "version.absent": "pass", "version.family": "pass",
        "version.none": "pass"}
    lib = next(d for d in found["distributions"] if d["name"] == "imagegen-fake-lib")
    assert lib == {"name": "imagegen-fake-lib", "version": "1.2.3", "hashes": {"sha256": "ab" * 32},
                   "license_expression": "MIT", "license": "x" * 300,
                   "license_classifiers": ["License :: OSI Approved :: MIT License"]}
    names = [d["name"].lower() for d in found["distributions"]]
    assert "torch" in names and len(names) == len(set(names))
    assert set(found["os"]) == {"id", "version_id"} and found["package_manager"] in ("deb", "rpm", None)
    if found["package_manager"]:
        assert found["os_packages"] and set(found["os_packages"][0]) == {"name", "version", "arch"}
    x86_64 = {"x86_64": "62", "aarch64": "183"}.get(platform.machine())
    if x86_64:
        assert any(path.endswith(".so") for path in found["machines"][x86_64])
        assert all(path.startswith(sys.prefix) for paths in found["machines"].values() for path in paths)


def test_its_text_runs_with_the_standard_library_alone(site):
    """As imagegen runs it in an image: `python -c "<the file's text>"`, here without site (-S) or the environment
    (-I), the venv's site-packages only on sys.path for the distributions' metadata."""
    paths = [str(site), sysconfig.get_paths()["purelib"]]
    found, stderr = run_inventory([sys.executable, "-S", "-I", "-c", SPY.format(paths=paths) + TEXT,
                                   str(site / "expected.json")])
    assert list(found) == KEYS and found["versions"]["lib"] == "1.2.3" and found["versions"]["family"] == "9.1.0.70"
    assert found["versions"]["torch_cuda"] == torch.version.cuda  # read from torch/version.py, torch not imported
    imported = {name.split(".")[0] for name in stderr.split("MODULES ", 1)[1].split()}
    assert not imported - set(sys.stdlib_module_names) - {"__main__"}, "a module outside the standard library"


def test_its_text_is_python_3_8():
    ast.parse(TEXT, feature_version=(3, 8))
    assert "from __future__ import annotations" not in TEXT and "removeprefix" not in TEXT


def test_the_expected_file_comes_from_the_argument_or_imagegen_expected(site, tmp_path):
    command = [sys.executable, "-m", "imagegen_contract.inventory"]
    found, _ = run_inventory(command, env={**ENV, "IMAGEGEN_EXPECTED": str(site / "expected.json")})
    assert "transformers" in found["versions"]
    found, _ = run_inventory(command, env={k: v for k, v in ENV.items() if k != "IMAGEGEN_EXPECTED"})
    assert set(found["versions"]) == {"python", "torch_cuda", "vlmgrpo"}
    missing = subprocess.run(command + [str(tmp_path / "absent.json")], capture_output=True, text=True, env=ENV)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == f"error: no expected-versions file at {tmp_path / 'absent.json'}\n"


def elf_header(machine: int, big_endian: bool = False) -> bytes:
    order = "big" if big_endian else "little"
    # e_ident (16 bytes: magic, class, data, version, padding), e_type (3: shared object), e_machine
    return b"\x7fELF" + bytes([2, 2 if big_endian else 1, 1]) + bytes(9) + (3).to_bytes(2, order) + \
        machine.to_bytes(2, order) + bytes(44)


def test_machines_groups_shared_libraries_by_their_elf_machine(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libx.so.1").write_bytes(elf_header(62))
    (tmp_path / "lib" / "liba.so").write_bytes(elf_header(183))
    (tmp_path / "lib" / "libz.cpython-311-s390x-linux-gnu.so").write_bytes(elf_header(22, big_endian=True))
    (tmp_path / "lib" / "notes.so").write_text("not an ELF file")
    (tmp_path / "lib" / "tool").write_bytes(elf_header(62))  # an executable, not a shared library
    os.symlink(tmp_path / "lib" / "libx.so.1", tmp_path / "lib" / "libx.so")
    assert inventory.machines(str(tmp_path)) == {"183": [str(tmp_path / "lib" / "liba.so")],
                                                 "22": [str(tmp_path / "lib" / "libz.cpython-311-s390x-linux-gnu.so")],
                                                 "62": [str(tmp_path / "lib" / "libx.so.1")]}


def test_info_and_selftest_read_their_versions_from_it(site, monkeypatch):
    from vlmgrpo.image.info import collect_info

    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("IMAGEGEN_EXPECTED", str(site / "expected.json"))
    versions = collect_info()["versions"]
    assert versions["lib"] == "1.2.3" and versions["family"] == "9.1.0.70" and versions["absent"] is None
    assert versions["torch"] == torch.__version__ and versions["vlmgrpo"] == metadata.version("vlmgrpo")
