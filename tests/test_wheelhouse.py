"""The wheelhouse as uv inside the build sees it: its copy of a locked file wins over the index's,
and a version it lacks, or has only for another platform, still comes from the index. Runs the real
uv against PyPI (through the proxy)."""

import base64
import hashlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from uv import find_uv_bin

from imagegen.render import wheelhouse as wh
from imagegen.stages.build import PipSettings

HOST = wh.supported_tags("3.11", "x86_64-manylinux_2_36")
ARM64 = wh.supported_tags("3.11", "aarch64-manylinux_2_36")


def _wheel(directory: Path, project: str, version: str, marker: str, tag: str = "py2.py3-none-any") -> Path:
    """A wheel of one module that says where it came from."""
    dist_info = f"{project}-{version}.dist-info"
    files = {
        f"{project}.py": f"ORIGIN = {marker!r}\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: imagegen-tests\nRoot-Is-Purelib: true\nTag: {tag}\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    path = directory / f"{project}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _uv_install(tmp_path: Path, wheelhouse: Path, requirements: str,
                python_platform: str | None = None) -> subprocess.CompletedProcess:
    """uv pip install as the build runs it, into tmp_path/site (for python_platform, when given)."""
    config = tmp_path / "uv.toml"
    config.write_text(PipSettings(wheelhouse=wheelhouse).uv_toml(wheelhouse_mount=str(wheelhouse)))
    (tmp_path / "requirements.txt").write_text(requirements)
    target = ["--python-platform", python_platform] if python_platform else []
    env = {**os.environ, "UV_CONFIG_FILE": str(config), "UV_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([find_uv_bin(), "pip", "install", "--python", sys.executable, "--target",
                           str(tmp_path / "site"), *target, "--no-deps", "--require-hashes", "-r",
                           str(tmp_path / "requirements.txt")], env=env, capture_output=True, text=True, timeout=300)


def _origin(tmp_path: Path) -> str:
    module = (tmp_path / "site" / "six.py").read_text()
    return "wheelhouse" if "ORIGIN = 'wheelhouse'" in module else "index"


def _staged(tmp_path: Path, *versions: str, tag: str = "py2.py3-none-any",
            supported: frozenset = HOST) -> Path:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    wheels = [_wheel(wheelhouse, "six", version, "wheelhouse", tag) for version in versions]
    wh.write_pages(wheelhouse, wh.pages({wheel.name: _sha256(wheel) for wheel in wheels}, supported, str(wheelhouse)))
    return wheelhouse


@pytest.mark.network
def test_uv_takes_the_wheelhouse_copy_of_a_file_the_index_also_has(tmp_path):
    """PyPI has six-1.17.0-py2.py3-none-any.whl too, with another hash: taking it would fail the hash check."""
    wheelhouse = _staged(tmp_path, "1.17.0")
    ours = _sha256(wheelhouse / "six-1.17.0-py2.py3-none-any.whl")
    result = _uv_install(tmp_path, wheelhouse, f"six==1.17.0 --hash=sha256:{ours}\n")
    assert result.returncode == 0, result.stderr
    assert _origin(tmp_path) == "wheelhouse"


@pytest.mark.network
def test_a_version_the_wheelhouse_lacks_comes_from_the_index(tmp_path):
    """uv's default strategy would look for six only in the wheelhouse, which has 1.17.0 alone, and fail."""
    wheelhouse = _staged(tmp_path, "1.17.0")
    pypi_hash = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"  # six-1.16.0-py2.py3-none-any.whl
    result = _uv_install(tmp_path, wheelhouse, f"six==1.16.0 --hash=sha256:{pypi_hash}\n")
    assert result.returncode == 0, result.stderr
    assert _origin(tmp_path) == "index"


@pytest.mark.network
def test_a_version_the_wheelhouse_has_only_for_another_platform_comes_from_the_index(tmp_path):
    """An arm64 image built with an x86_64 wheelhouse: uv would stop at the wheelhouse's 1.17.0 and fail."""
    wheelhouse = _staged(tmp_path, "1.17.0", tag="py3-none-manylinux_2_17_x86_64", supported=ARM64)
    pypi_hash = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"  # six-1.17.0-py2.py3-none-any.whl
    result = _uv_install(tmp_path, wheelhouse, f"six==1.17.0 --hash=sha256:{pypi_hash}\n",
                         python_platform="aarch64-manylinux_2_36")
    assert result.returncode == 0, result.stderr
    assert _origin(tmp_path) == "index"


def test_uv_settings_put_the_wheelhouse_before_the_users_indexes():
    settings = PipSettings(index_url="https://mirror.example/simple", extra_index_urls=("https://extra.example/simple",),
                           wheelhouse=Path("wheels"))
    pip = tomllib.loads(settings.uv_toml())["pip"]
    assert pip["index-url"] == "https://mirror.example/simple"
    assert pip["extra-index-url"] == ["file:///wheelhouse/simple", "https://extra.example/simple"]
    assert pip["index-strategy"] == "unsafe-first-match"
    assert tomllib.loads(PipSettings(index_url="https://mirror.example/simple").uv_toml())["pip"] == {
        "index-url": "https://mirror.example/simple"}


def test_uvs_index_lists_the_files_that_fit_the_image_and_pips_page_every_file():
    hashes = {"six-1.17.0-py2.py3-none-any.whl": "a" * 64, "notes.tar.gz": "b" * 64, "Flash_Attn-2.8.3.tar.gz": "c" * 64,
              "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl": "d" * 64,
              "numpy-2.4.6-cp312-cp312-manylinux_2_27_aarch64.whl": "e" * 64,
              "pillow-13.0.0-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl": "f" * 64}
    arm64 = wh.pages(hashes, ARM64)
    assert sorted(arm64) == ["index.html", "simple/flash-attn/index.html", "simple/pillow/index.html",
                             "simple/six/index.html"]
    assert 'href="file:///wheelhouse/six-1.17.0-py2.py3-none-any.whl#sha256=' + "a" * 64 in arm64["simple/six/index.html"]
    assert all(name in arm64["index.html"] for name in hashes)
    assert sorted(wh.pages(hashes, HOST)) == ["index.html", "simple/flash-attn/index.html", "simple/six/index.html",
                                              "simple/torch/index.html"]
    assert "simple/torch/index.html" not in wh.pages(hashes, wh.supported_tags("3.11", "x86_64-manylinux_2_17"))
