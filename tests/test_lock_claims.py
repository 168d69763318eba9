"""A lock checked against what it claims: each hand edit of a current lock that render would have installed under a
tag saying otherwise is refused by validate, render and build, at its line and key in the lock file."""

from __future__ import annotations

import json

import pytest

from imagegen.core import jsonsource
from imagegen.matrix.yamlsource import format_path
from tests.helpers import locked_matrix
from tests.test_cli import imagegen, on

AMD64 = ("platforms", "linux/amd64")


def packages(data) -> list:
    return data["platforms"]["linux/amd64"]["packages"]


def entry(data, name: str) -> dict:
    return next(p for p in packages(data) if p["name"] == name)


def index_of(data, name: str) -> int:
    return next(n for n, p in enumerate(packages(data)) if p["name"] == name)


def torch_2_0_0(data):
    for section in data["platforms"].values():
        next(p for p in section["packages"] if p["name"] == "torch")["version"] = "2.0.0"


def added(data):
    packages(data).append({**entry(data, "click"), "name": "not-required", "required_by": []})


def forged(data):
    """An extra package that claims a parent: the parent's metadata does not require it."""
    packages(data).append({**entry(data, "click"), "name": "forged", "required_by": ["tensorboard"]})


def absl_requirement(data) -> tuple[int, str]:
    """tensorboard's requirement of absl-py, as its index's metadata writes it, and its place in `requires`."""
    return next((n, line) for n, line in enumerate(entry(data, "tensorboard")["requires"])
                if line.startswith("absl-py"))


def removed(data):
    """A transitive dependency dropped: the image, installed with --no-deps, would lack it."""
    del packages(data)[index_of(data, "absl-py")]


# (image, edit, the key path it breaks, what is said there, rule)
EDITS = {
    "torch": ("cpu", torch_2_0_0, lambda d: (*AMD64, "packages", index_of(d, "torch"), "version"),
              "torch 2.0.0, where the matrix pins torch 2.14.1 for cpu: its tag and labels say 2.14.1", "lock-pins"),
    "pinned": ("cpu", lambda d: entry(d, "peft").update(version="0.21.3"),
               lambda d: (*AMD64, "packages", index_of(d, "peft"), "version"),
               "peft 0.21.3, where the matrix pins peft 0.21.2 for cpu: its tag and labels say 0.21.2", "lock-pins"),
    "changed": ("cpu", lambda d: entry(d, "click").update(version="7.0"),
                lambda d: (*AMD64, "packages", index_of(d, "click"), "version"),
                "click 7.0 does not meet 'click>=8.0', which the lock was made from", "lock-packages"),
    "added": ("cpu", added, lambda d: (*AMD64, "packages", len(packages(d)) - 1, "name"),
              "not-required 8.5.1: no requirement the lock was made from and no package in it requires it (by their "
              "index's metadata)", "lock-packages"),
    "forged": ("cpu", forged, lambda d: (*AMD64, "packages", len(packages(d)) - 1, "name"),
               "forged 8.5.1: no requirement the lock was made from and no package in it requires it (by their "
               "index's metadata)", "lock-packages"),
    "removed": ("cpu", removed,
                lambda d: (*AMD64, "packages", index_of(d, "tensorboard"), "requires", absl_requirement(d)[0]),
                lambda d: f"tensorboard {entry(d, 'tensorboard')['version']} requires "
                          f"'{absl_requirement(d)[1]}', and the lock holds no absl-py", "lock-packages"),
    "transitive": ("cpu", lambda d: entry(d, "absl-py").update(version="0.1"),
                   lambda d: (*AMD64, "packages", index_of(d, "absl-py"), "version"),
                   lambda d: f"absl-py 0.1 does not meet '{absl_requirement(d)[1]}', which tensorboard "
                             f"{entry(d, 'tensorboard')['version']} requires", "lock-packages"),
    "required-by": ("cpu", lambda d: entry(d, "absl-py").update(required_by=["click"]),
                    lambda d: (*AMD64, "packages", index_of(d, "absl-py"), "required_by"),
                    "absl-py: required_by ['click'], where its index's metadata has it required by ['tensorboard']",
                    "lock-packages"),
    "duplicated": ("cpu", lambda d: packages(d).append(dict(entry(d, "click"))),
                   lambda d: (*AMD64, "packages", len(packages(d)) - 1, "name"),
                   "'click' is listed twice (also at packages[5]): one entry per package", "lock-format"),
    "image": ("cpu", lambda d: d.update(image="cu124-torch2.6"), lambda d: ("image",),
              "'cu124-torch2.6', the lock of another image: this file is cpu's", "lock-image"),
    "platform": ("cu124-torch2.6", lambda d: d["platforms"].update({"linux/arm64": d["platforms"]["linux/amd64"]}),
                 lambda d: ("platforms", "linux/arm64"),
                 "cu124-torch2.6 is not built for linux/arm64 (the matrix plans linux/amd64)", "lock-image"),
    "cuda": ("cu124-torch2.6", lambda d: entry(d, "nvidia-cuda-runtime-cu12").update(version="12.8.90"),
             lambda d: (*AMD64, "packages", index_of(d, "nvidia-cuda-runtime-cu12"), "version"),
             "nvidia-cuda-runtime-cu12 12.8.90, where cu124-torch2.6's torch build is for CUDA 12.4", "lock-pins"),
    "base": ("cu124-torch2.6", lambda d: d["platforms"]["linux/amd64"]["base"].update(ref="elsewhere/cuda:12.4"),
             lambda d: (*AMD64, "base", "ref"),
             "'elsewhere/cuda:12.4', where cu124-torch2.6 builds on nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
             "lock-pins"),
    "flash-attn": ("cu124-torch2.6", lambda d: d["platforms"]["linux/amd64"]["flash_attn"].update(
        requirement="flash-attn @ https://example.com/flash_attn-2.7.4.post1-cp311-cp311-linux_x86_64.whl"),
        lambda d: (*AMD64, "flash_attn", "requirement"),
        "'flash-attn @ https://example.com/flash_attn-2.7.4.post1-cp311-cp311-linux_x86_64.whl', where the lock was "
        "made for 'flash-attn @ https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4.post1/"
        "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl'", "lock-pins"),
}


@pytest.mark.parametrize("probe", sorted(EDITS))
def test_a_lock_that_belies_its_claims_is_refused_at_its_line_and_key(tmp_path, probe):
    image, edit, where, says, rule = EDITS[probe]
    matrix = locked_matrix(tmp_path)
    path = tmp_path / "locks" / f"{image}.json"
    data = json.loads(path.read_text())
    says = says(data) if callable(says) else says  # of the lock before the edit
    edit(data)
    text = json.dumps(data, indent=1)
    path.write_text(text)
    line = jsonsource.line_of(text, where(data))
    last = where(data)[-1]  # a key is on its line; an item of a list is its line
    assert (f'"{last}"' if isinstance(last, str) else json.dumps(says.split("'")[1])) in text.splitlines()[line - 1]
    problem = (f"{path}:{line}: {format_path(where(data))}: {says}; run `imagegen lock --matrix {matrix} --image "
               f"{image}` [{rule}]")
    result = imagegen("validate", *on(matrix))
    assert result.returncode == 2 and f"error: {problem}\n" in result.stderr, result.stderr
    for command in (("render", "--out", str(tmp_path / "out")), ("build",)):
        result = imagegen(*command, *on(matrix), "--image", image)
        assert result.returncode == 1 and result.stderr.startswith(f"error: {image}: {problem}\n"), result.stderr
    assert not (tmp_path / "out").exists()


def test_the_line_of_a_key_path_in_json():
    text = '{\n "a": [\n  1,\n  {"b": "x,]}"},\n  {\n   "c": 3\n  }\n ],\n "d": {}\n}\n'
    assert [jsonsource.line_of(text, path) for path in [("a",), ("a", 1, "b"), ("a", 2, "c"), ("d",), ("d", "e"),
                                                        ("a", 5), ("zz",), ()]] == [2, 4, 6, 9, 9, 2, 1, 1]
    assert jsonsource.line_of("not json", ("a",)) == jsonsource.line_of("", ("a",)) == 1
