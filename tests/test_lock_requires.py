"""Which file of a locked release its requirements are read from (imagegen/locking/requires.py): pure choice."""

from __future__ import annotations

from imagegen.locking.index import IndexFile
from imagegen.locking.requires import metadata_file


def file(name: str, sha: str) -> IndexFile:
    return IndexFile(name, f"https://files.example/{name}", sha, None, False)


SDIST = file("pkg-1.0.tar.gz", "s")
ARM = file("pkg-1.0-cp311-cp311-manylinux_2_28_aarch64.whl", "a")
X86_312 = file("pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "b")
X86_311 = file("pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl", "c")
ABI3 = file("pkg-1.0-cp39-abi3-manylinux_2_17_x86_64.whl", "d")
PURE = file("pkg-1.0-py3-none-any.whl", "e")


def test_the_wheel_for_the_lock_s_python_and_machine_among_the_locked_files():
    files = [SDIST, ARM, X86_312, X86_311]
    assert metadata_file(files, ["sha256:s", "sha256:a", "sha256:b", "sha256:c"], "3.11", "x86_64") == X86_311
    assert metadata_file(files, ["sha256:a", "sha256:b", "sha256:c"], "3.11", "aarch64") == ARM
    assert metadata_file([SDIST, ABI3], ["sha256:d"], "3.12", "x86_64") == ABI3
    assert metadata_file([PURE], ["sha256:e"], "3.13", "aarch64") == PURE


def test_a_file_the_lock_does_not_hash_is_not_read_while_one_it_does_is_there():
    assert metadata_file([X86_311, X86_312], ["sha256:b"], "3.11", "x86_64") == X86_312  # another wheel of it
    assert metadata_file([SDIST, X86_311], ["sha256:s"], "3.11", "x86_64") == SDIST  # DeepSpeed: an sdist alone
    assert metadata_file([], [], "3.11", "x86_64") is None


def test_a_line_holds_by_its_marker_and_the_extras_asked():
    from imagegen.locking.markers import applicable, holds

    lines = ("a>=1", "b; python_version < '3.12'", "c; extra == 'dev'", "d; extra == 'Math_Verify'",
             "e; extra == 'x' or python_version >= '3.11'", "f; sys_platform == 'win32'", "not a requirement !")
    kept = {line.split(";")[0].split(">")[0]: extras for _, line, extras in applicable(lines, "3.11", "x86_64")}
    assert kept == {"a": None, "b": None, "c": frozenset({"dev"}), "d": frozenset({"math-verify"}), "e": None,
                    "not a requirement !": None}
    assert holds("d; extra == 'Math_Verify'", "3.11", "x86_64", kept["d"], {"math-verify"})
    assert not holds("c; extra == 'dev'", "3.11", "x86_64", kept["c"], {"math-verify"})
    assert [line for _, line, _ in applicable(lines, "3.12", "x86_64")][1] == "c; extra == 'dev'"  # b: not on 3.12
