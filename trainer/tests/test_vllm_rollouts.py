"""GRPO with vLLM rollouts: TRL's keys reach GRPOConfig unchanged; `use_vllm` where vLLM cannot run is one line before
any weights load (--dry-run too); `vlmgrpo vllm-serve` is TRL's server, or the same line without vLLM."""

import os
import subprocess
import sys

import pytest

from conftest import ENV, in_process, train_args, vlmgrpo
from vlmgrpo.training import rollouts

NOT_INSTALLED = "key 'use_vllm': vLLM is not installed in this image; use an image with vLLM: its name, a tag too, " \
                "ends -vllm<X.Y>"
NO_GPU = "key 'use_vllm': vLLM generates on CUDA GPUs and none is visible here"
VLLM_KEYS = {"use_vllm": True, "vllm_mode": "server", "vllm_gpu_memory_utilization": 0.5,
             "vllm_tensor_parallel_size": 2, "vllm_enable_sleep_mode": True, "vllm_server_host": "10.0.0.2",
             "vllm_server_port": 8001, "vllm_server_timeout": 600.0}


@pytest.fixture
def fake_vllm(tmp_path):
    """An importable package named vllm (find_spec sees vLLM installed), on this process's and a child's path."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("__version__ = '0.31.0'\n")
    sys.path.insert(0, str(tmp_path))
    yield str(tmp_path)
    sys.path.remove(str(tmp_path))


@pytest.mark.skipif(rollouts.vllm_installed(), reason="vLLM is installed here")
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "train"])
def test_use_vllm_without_vllm_is_one_line_naming_the_images_that_have_it(tiny, tmp_path, dry_run):
    done = in_process(*train_args(tiny, tmp_path / "out", "--use-vllm", *(["--dry-run"] if dry_run else [])))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: command line: {NOT_INSTALLED}"), done.stderr
    assert "`imagegen matrix --with vllm` lists them" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(rollouts.vllm_installed(), reason="vLLM is installed here")
def test_use_vllm_is_checked_before_the_model_and_the_data(tmp_path):
    """Checked first: the model and data named do not even exist, and the vLLM line is still the only one."""
    done = in_process("train", "--model", tmp_path / "nowhere", "--data", tmp_path / "nowhere.jsonl", "--output",
                      tmp_path / "run", "--use-vllm", "--dry-run")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: command line: {NOT_INSTALLED}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_use_vllm_with_vllm_and_no_gpu_is_one_line(tiny, tmp_path, fake_vllm, monkeypatch):
    monkeypatch.setattr("vlmgrpo.models.source.cuda_available", lambda: False)
    done = in_process(*train_args(tiny, tmp_path / "out", "--use-vllm", "--dry-run"))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: command line: {NO_GPU}; run on a GPU host (docker run --gpus all), or "
                                   "set use_vllm: false")


@pytest.mark.slow
@pytest.mark.skipif(rollouts.vllm_installed(), reason="vLLM is installed here")
def test_a_real_process_says_both_lines_without_a_traceback(tiny, tmp_path, fake_vllm):
    args = train_args(tiny, tmp_path / "out", "--use-vllm", "--dry-run")
    missing = vlmgrpo(*args)
    # the fake package stands for an installed vLLM; this host has no CUDA GPU
    present = vlmgrpo(*args, env={**ENV, "PYTHONPATH": os.pathsep.join([fake_vllm, os.environ.get("PYTHONPATH", "")]),
                                  "CUDA_VISIBLE_DEVICES": ""})
    for done, line in ((missing, NOT_INSTALLED), (present, NO_GPU)):
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert line in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_trls_vllm_keys_reach_grpo_config_unchanged(tiny, tmp_path):
    from trl import GRPOConfig

    from vlmgrpo.config.load import build_config
    from vlmgrpo.commands.grpo import GRPO
    from vlmgrpo.training.started import build_trl_config

    config = build_config({"output_dir": str(tmp_path / "out"), **VLLM_KEYS}, "run.yaml", {}, GRPO)
    assert config.where("vllm_mode") == "run.yaml"
    grpo_config = build_trl_config(config, None)  # no DeepSpeed
    assert isinstance(grpo_config, GRPOConfig)  # the recipe's subclass (config/trl_configs.py)
    assert {key: getattr(grpo_config, key) for key in VLLM_KEYS} == VLLM_KEYS


@pytest.mark.parametrize("key,value,message", [
    ("vllm_mode", "remote", "key 'vllm_mode': 'remote' is not one of: colocate, server"),
    ("vllm_gpu_memory_utilization", 1.5, "key 'vllm_gpu_memory_utilization': must be > 0 and <= 1"),
    ("vllm_tensor_parallel_size", 0, "key 'vllm_tensor_parallel_size': must be >= 1 (GPUs per vLLM engine)"),
])
def test_bad_vllm_values_are_one_line(tiny, tmp_path, key, value, message):
    done = in_process(*train_args(tiny, tmp_path / "out", "--use-vllm", "--set", f"{key}={value}", "--dry-run"))
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_vllm_serve_is_trls_server_with_the_arguments_as_given():
    command = rollouts.vllm_serve_command(["--model", "/models/m", "--tensor-parallel-size", "1", "--port", "8000"])
    assert os.path.basename(command[0]) == "trl"
    assert command[1:] == ["vllm-serve", "--model", "/models/m", "--tensor-parallel-size", "1", "--port", "8000"]


@pytest.mark.skipif(rollouts.vllm_installed(), reason="vLLM is installed here")
def test_vllm_serve_without_vllm_is_the_same_one_line():
    done = vlmgrpo("vllm-serve", "--model", "/models/m")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("error: vllm-serve: vLLM is not installed in this image; use an image with "
                                          "vLLM: its name, a tag too, ends -vllm<X.Y>"), done.stderr


def test_vllm_serve_execs_trl_with_its_arguments(fake_vllm, tmp_path):
    """With vLLM there, the process becomes `trl vllm-serve ARGS` (a stand-in trl script records its argv)."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "trl").write_text("#!/bin/sh\necho \"trl $*\"\n")
    (fake_bin / "trl").chmod(0o755)
    code = ("import sys, vlmgrpo.training.rollouts as r; r.trl_script = lambda: 'trl'; "
            "r.exec_vllm_serve(sys.argv[1:])")
    env = {**ENV, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([fake_vllm, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, "--model", "m", "--port", "8001"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trl vllm-serve --model m --port 8001"


def test_the_vllm_server_example_is_the_3b_recipe_on_seven_training_gpus(tmp_path):
    """examples/launch/vllm-server.yaml appended to the 3B recipe, as examples/launch/vllm-server.sh reads it: TRL's
    server-mode keys, and a batch of whole groups on the 7 GPUs that train."""
    from conftest import REPO
    from vlmgrpo.config.load import load_config
    from vlmgrpo.commands.grpo import GRPO
    from vlmgrpo.launch.torchrun import check_batch, generation_batch

    recipe = tmp_path / "grpo_vllm.yaml"
    recipe.write_text((REPO / "examples" / "qwen2_5_vl_3b_rec_zero3.yaml").read_text()
                      + (REPO / "examples" / "launch" / "vllm-server.yaml").read_text())
    config = load_config(str(recipe), {"nproc_per_node": 7}, GRPO)
    check_batch(config, 7, generation_batch(config, 7))
    assert (config.trl.use_vllm, config.trl.vllm_mode, config.trl.vllm_server_port) == (True, "server", 8000)
    script = (REPO / "examples" / "launch" / "vllm-server.sh").read_text()
    assert "--nproc-per-node 7" in script and "CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7" in script
    assert "CUDA_VISIBLE_DEVICES=0" in script and 'vllm-serve --model "$MODEL"' in script
