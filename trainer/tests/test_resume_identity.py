"""A checkpoint knows its model by the weights' manifest (training/checkpoint.py), not by the path they were read from:
the same model at another path resumes, other weights at the same path are refused in one line saying what differs."""

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from conftest import in_process
from vlmgrpo.errors import ConfigError
from vlmgrpo.training.checkpoint import EDGE_BYTES, foreign, resolve_resume, run_identity, write_record


def make_model(directory, seed=0, shards=({"w": (64,)},)):
    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    for index, shapes in enumerate(shards, 1):
        name = "model.safetensors" if len(shards) == 1 else f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        save_file({key: torch.randn(*shape, generator=generator) for key, shape in shapes.items()},
                  str(directory / name))
    (directory / "config.json").write_text('{"model_type": "tiny"}')
    return directory


def checkpoint_of(output, model, command="train", step=3):
    """A complete checkpoint-N of a run on model (its weights are not read on resume's checks)."""
    checkpoint = output / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    write_record(str(checkpoint), run_identity(command, str(model)))
    return checkpoint


def test_the_same_weights_at_another_path_resume(tmp_path):
    model = make_model(tmp_path / "a" / "model")
    checkpoint = checkpoint_of(tmp_path / "out", model)
    moved = shutil.copytree(model, tmp_path / "b" / "elsewhere")
    assert foreign(str(checkpoint), run_identity("train", str(moved))) is None
    assert resolve_resume(str(checkpoint), str(tmp_path / "out"), run_identity("train", str(moved))) == str(checkpoint)


@pytest.mark.parametrize("change, said", [
    (lambda model: make_model(model, seed=1), "model.safetensors holds the same tensors with other values"),
    (lambda model: make_model(model, shards=({"w": (65,)},)),
     "model.safetensors holds other tensors (names, dtypes or shapes)"),
    (lambda model: (model / "config.json").write_text('{"model_type": "other"}'), "config.json differs"),
])
def test_other_weights_at_the_same_path_are_refused_saying_what_differs(tmp_path, change, said):
    model = make_model(tmp_path / "model")
    checkpoint = checkpoint_of(tmp_path / "out", model)
    change(model)
    with pytest.raises(ConfigError) as refused:
        resolve_resume(str(checkpoint), str(tmp_path / "out"), run_identity("train", str(model)))
    assert str(refused.value) == (
        f"--resume {checkpoint}: {checkpoint} holds a checkpoint of `train` on {model}, whose weights are not those "
        f"at {model} now ({said}): resuming would train one model's weights under the other's name; give the "
        "--output of this run, or --overwrite-output to start over")


def test_the_manifest_reads_headers_and_the_edges_of_each_shard_and_misses_only_the_middle(tmp_path):
    """A shard of 3 MiB: a value in its last MiB is seen, one in its middle MiB is not (the comment's price)."""
    shards = ({"a": (EDGE_BYTES // 4,), "b": (EDGE_BYTES // 4,), "c": (EDGE_BYTES // 4,)}, {"d": (8,)})
    model = make_model(tmp_path / "model", shards=shards)
    (model / "training_args.bin").write_bytes(b"a training output's arguments, not weights")
    identity = run_identity("train", str(model))
    assert sorted(identity["weights"]) == ["config.json", "model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"]
    checkpoint = checkpoint_of(tmp_path / "out", model)
    first = model / "model-00001-of-00002.safetensors"
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.write_bytes(bytes(data))
    assert foreign(str(checkpoint), run_identity("train", str(model))) is None
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    assert "model-00001-of-00002.safetensors holds the same tensors with other values" in foreign(
        str(checkpoint), run_identity("train", str(model)))
    (model / "model-00002-of-00002.safetensors").unlink()
    assert "model-00001-of-00002.safetensors holds the same tensors with other values (and 1 more)" in foreign(
        str(checkpoint), run_identity("train", str(model)))
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    assert "(model-00002-of-00002.safetensors is missing)" in foreign(
        str(checkpoint), run_identity("train", str(model)))


def test_resume_dry_run_takes_a_moved_model_and_refuses_other_weights_in_one_line(tiny, tmp_path):
    moved = shutil.copytree(tiny["model"], tmp_path / "moved")
    output = tmp_path / "out"
    checkpoint = checkpoint_of(output, tiny["model"])
    args = ("train", "--model", moved, "--data", tiny["data"], "--image-root", tiny["image_root"], "--output", output,
            "--num-generations", "2", "--batch-size", "2", "--resume", checkpoint, "--dry-run")
    assert in_process(*args).returncode == 0
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # a fine-tune of the same shapes, as far as the manifest can tell
    weights.write_bytes(bytes(data))
    refused = in_process(*args)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert f"whose weights are not those at {moved} now (model.safetensors holds the same tensors with other " \
           "values)" in refused.stderr
