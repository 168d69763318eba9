"""The user guide's walkthrough "Adding a CUDA version", replayed offline: on a copy of the matrix without CUDA 13.2
(and the images on it), each step's YAML is applied as the guide says, and `imagegen validate` must say what the guide
shows it saying, until the image's committed lock makes it pass; then `imagegen matrix --cuda 13.2` and `imagegen
lock`'s summary lines are what the guide prints. So the walkthrough is how cu132-torch2.15 came in, and stays so."""

from __future__ import annotations

import contextlib
import re
import shutil

import pytest
from click.testing import CliRunner

from imagegen.cli import main
from imagegen.locking import lockfile
from imagegen.locking import resolve
from imagegen.workspace import Workspace
from tests.helpers import MATRIX_PATH, REPO

GUIDE = REPO / "docs" / "user-guide.md"
IMAGE = "cu132-torch2.15"


def walkthrough() -> tuple[list[str], list[str]]:
    """The section's YAML blocks and its other code blocks, in order."""
    text = GUIDE.read_text()
    section = text[text.index("## Adding a CUDA version"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", section, re.S | re.M)
    return [b for lang, b in blocks if lang == "yaml"], [b for lang, b in blocks if not lang]


def without_cuda_13_2() -> str:
    """The real matrix as it was before CUDA 13.2: its cuda entry and the images on it taken out."""
    text = MATRIX_PATH.read_text()
    text = re.sub(r'(?ms)^  "13\.2":\n.*?(?=^\S|^\n)', "", text)
    head, images = text.split("\nimages:\n")
    kept = [b for b in re.split(r"(?m)^(?=  - name: )", images) if '\n    cuda: "13.2"\n' not in b]
    return head + "\nimages:\n" + "".join(kept)


def imagegen(root, *args: str):
    """The command in the copy, as a user runs it there (its paths relative to the copy)."""
    with contextlib.chdir(root):
        result = CliRunner().invoke(main, list(args))
    return result.exit_code, (result.stdout + result.stderr).replace(f"{root}/", "")


def validate(root, matrix: str) -> tuple[int, str]:
    (root / "matrix.yaml").write_text(matrix)
    return imagegen(root, "validate")


def errors(output: str) -> list[str]:
    """The error lines, with the file, line and image index as the guide writes them."""
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    return sorted(re.sub(r"^error: \S*matrix\.yaml:\d+: images\[\d+\]", "error: matrix.yaml:LINE: images[N]", line)
                  for line in lines)


def shown(block: str) -> list[str]:
    return sorted(line for line in block.splitlines() if line.startswith("error: "))


@pytest.fixture
def root(tmp_path):
    shutil.copytree(REPO / "locks", tmp_path / "locks")
    kept = set(re.findall(r"(?m)^  - name: (\S+)$", without_cuda_13_2()))
    for lock in (tmp_path / "locks").glob("*.json"):
        if lock.stem not in kept:
            lock.unlink()
    for name in ("templates", "trainer", "contract"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def test_the_walkthrough_replayed_says_what_the_guide_shows(root):
    (image, cuda, source_build, fix), (first, refused, locked, listed) = walkthrough()
    matrix = without_cuda_13_2()
    assert validate(root, matrix)[0] == 0, validate(root, matrix)[1]
    matrix += "\n" + image  # step 1: the image, at the end of images
    assert errors(validate(root, matrix)[1]) == shown(first)
    end = re.search(r"(?ms)^cuda:\n.*?\n(?=\n\S)", matrix).end()
    matrix = matrix[:end] + cuda + matrix[end:]  # step 2: the CUDA facts, last of cuda
    head, tail = matrix.rsplit("    flash_attn: 2.8.3\n", 1)
    assert errors(validate(root, head + source_build + tail)[1]) == shown(refused)  # step 4: the source build
    matrix = head + fix + tail
    until = re.search(r"Until then `imagegen validate` says `(no lock .*?)`;", GUIDE.read_text(), re.S)[1]
    assert errors(validate(root, matrix)[1]) == [f"error: matrix.yaml:LINE: images[N].name: {until}".replace("\n", " ")]
    shutil.copy(REPO / "locks" / f"{IMAGE}.json", root / "locks")  # step 5: its lock, as `imagegen lock` made it
    code, output = validate(root, matrix)
    assert code == 0, output
    assert "its `[deepspeed-tested-torch]` line names the new image" in GUIDE.read_text()
    assert any("[deepspeed-tested-torch]" in line and IMAGE in line for line in output.splitlines()), output
    assert lock_lines(root) == [line.split("@sha256:")[0] for line in locked.splitlines()[1:]]
    assert matrix_table(root) == listed.split("\n", 1)[1]


def lock_lines(root) -> list[str]:
    """`imagegen lock`'s summary of each platform of the committed lock, its base as a pinned one reads."""
    workspace = Workspace.of(root=root)
    families = workspace.load().matrix.components.torch_families.values()
    path = root / "locks" / f"{IMAGE}.json"
    locks = lockfile.loads(path.read_text(), f"imagegen lock --image {IMAGE}")
    return [f"locks/{IMAGE}.json: " + resolve.summary(lock, families).replace(" (unpinned)", "")
            for lock in locks.values()]


def matrix_table(root) -> str:
    code, output = imagegen(root, "matrix", "--cuda", "13.2")
    assert code == 0, output
    return re.sub(r"-[0-9a-f]{12}$", "-<inputs>", output, flags=re.M)
