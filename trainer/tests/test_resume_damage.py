"""A checkpoint whose files are whole by size but not what the trainer wrote (issue 53, item 12): weights of NaN at
the same size, an optimizer state that is a planted pickle. Each is one line naming the checkpoint at --resume, where
a 95- or a 63-line traceback came before, and the checkpoint is marked so that a restart takes the one before."""

import shutil
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import train_args, vlmgrpo


class Planted:
    """What torch.load(weights_only=True) refuses: an object of a class, not tensors."""


@pytest.fixture(scope="module")
def checkpoint(tiny, tmp_path_factory):
    output = tmp_path_factory.mktemp("run") / "out"
    vlmgrpo(*train_args(tiny, output, "--max-steps", "2", "--save-steps", "2"), check=True)
    return output / "checkpoint-2"


def resumed(tiny, checkpoint, tmp_path, spoil):
    target = tmp_path / "out"
    target.mkdir()
    shutil.copytree(checkpoint, target / "checkpoint-2")
    spoil(target / "checkpoint-2")
    return target, vlmgrpo(*train_args(tiny, target, "--max-steps", "3", "--resume", str(target / "checkpoint-2")))


def nan_weights(checkpoint):
    weights = checkpoint / "model.safetensors"
    size = weights.stat().st_size
    tensors = {name: torch.full_like(tensor, float("nan")) if tensor.is_floating_point() else tensor
               for name, tensor in load_file(weights).items()}
    save_file(tensors, weights, metadata={"format": "pt"})
    assert weights.stat().st_size == size  # what the record checks: still whole


def planted_optimizer(checkpoint):
    """A torch.save of an object, padded to the saved file's size (the record's size check passes)."""
    path = checkpoint / "optimizer.pt"
    size = path.stat().st_size
    torch.save({"state": Planted(), "pad": b"x" * (size - 4_000)}, path)  # torch aligns its records: a bit short
    comment = 0
    for _ in range(5):  # then the archive's comment makes up the bytes
        comment += size - path.stat().st_size
        with zipfile.ZipFile(path, "a") as archive:
            archive.comment = b"x" * comment
        if path.stat().st_size == size:
            return
    raise AssertionError(f"the planted file is {path.stat().st_size} bytes, not {size}")


@pytest.mark.slow
@pytest.mark.parametrize("spoil, says", [
    (nan_weights, "weight tensors with NaN or infinity"),
    (planted_optimizer, "its optimizer or scheduler state does not load as plain tensors"),
])
def test_a_checkpoint_whole_by_size_but_spoiled_is_one_line(tiny, checkpoint, tmp_path, spoil, says):
    target, result = resumed(tiny, checkpoint, tmp_path, spoil)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and says in errors[0] and str(target / "checkpoint-2") in errors[0], result.stderr[-2000:]
    assert (target / "checkpoint-2" / "vlmgrpo_load_failed").exists()  # a restart resumes from the one before
