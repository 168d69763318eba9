"""`vlmgrpo sft` end to end on tiny models made locally, through the real CLI in child processes, and SFT then GRPO."""

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from conftest import LORA, REPO, read_jsonl, sft_args, vlmgrpo
from test_train import free_port, run_until_step_then_signal
from vlmgrpo.commands.cli import main


@pytest.fixture(scope="module")
def lora_run(tiny_text, tmp_path_factory):
    """examples/sft_chat_tiny.yaml: LoRA on the three formats, a quarter of the rows held out, evaluations at steps 2
    and 4, checkpoints at 2 and 4, merged."""
    work = tmp_path_factory.mktemp("sft")
    shutil.copy(REPO / "examples" / "sft_chat_tiny.yaml", work)
    (work / "tiny-chat").symlink_to(Path(tiny_text["model"]).parent)
    output = work / "out"
    result = vlmgrpo("sft", "--config", work / "sft_chat_tiny.yaml", "--output", output, "--max-steps", "4",
                     "--save-steps", "2", check=True)
    return output, result


@pytest.mark.slow
def test_lora_sft_on_three_formats_with_an_eval_split(tiny_text, lora_run, tmp_path):
    output, result = lora_run
    metrics = read_jsonl(output / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 2, 3, 4, 4]
    steps, evaluations = [m for m in metrics if "loss" in m], [m for m in metrics if "eval_loss" in m]
    assert all(m["mean_token_accuracy"] is not None and m["grad_norm"] is not None for m in steps)
    assert all(isinstance(m["eval_loss"], float) for m in evaluations)
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert "step 4/4 loss=" in result.stdout and "eval at step 4: loss=" in result.stdout
    trainable = next(line for line in result.stderr.splitlines() if "trainable parameters:" in line)
    counts = [int(n.replace(",", "")) for n in trainable.split(": ")[-1].split(" (")[0].split(" of ")]
    assert 0 < counts[0] < counts[1] // 5, trainable
    assert list((output / "runs").glob("*/events.out.tfevents.*"))
    adapter = load_file(str(output / "adapter" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in name for name in adapter)
    # Every row of each format was read, and a quarter held out.
    summary = CliRunner().invoke(main, sft_args(tiny_text, tmp_path / "dry", "--set", "val_split_ratio=0.25",
                                                "--dry-run")).output
    assert summary.count("8 rows read, 8 used, 0 images, 0 errors") == 3, summary
    assert "split: 18 training rows, 6 validation rows" in summary


@pytest.mark.slow
def test_the_merged_model_has_the_adapter_in_its_weights(tiny_text, lora_run, tmp_path):
    output, _ = lora_run
    base = load_file(f"{tiny_text['model']}/model.safetensors")
    merged = load_file(str(output / "merged" / "model.safetensors"))
    assert merged.keys() == base.keys()
    changed = {name for name in base if not torch.equal(base[name], merged[name])}
    assert changed and all(name.rsplit(".", 2)[-2].endswith("_proj") for name in changed), changed
    assert (output / "merged" / "tokenizer_config.json").is_file()
    # `vlmgrpo merge` writes the same model from the adapter, and will not write over a directory.
    again = tmp_path / "merged"
    vlmgrpo("merge", "--adapter", output / "adapter", "--output", again, check=True)
    remerged = load_file(str(again / "model.safetensors"))
    assert all(torch.equal(remerged[name], merged[name]) for name in merged)
    refused = vlmgrpo("merge", "--adapter", output / "adapter", "--output", again)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        f"--output: {again} exists and is not empty; choose another --output, or replace it with --overwrite-output")


def test_loss_is_on_assistant_turns_only_by_default(tiny_text, tmp_path):
    """Labels of a real training batch: only the assistant turns' tokens (and their <|im_end|>) count."""
    from vlmgrpo.config.load import load_config
    from vlmgrpo.training.plan import make_plan
    from vlmgrpo.training.started import start
    from vlmgrpo.commands.sft import SFT

    def labelled_text(overrides):
        config = load_config(None, {"model_name_or_path": tiny_text["model"], "data": [tiny_text["messages"]],
                                    "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 2,
                                    "max_steps": 1, **overrides}, SFT)
        trainer = SFT.build_trainer(start(make_plan(config)))
        batch = next(iter(trainer.get_train_dataloader()))
        tokenizer = trainer.processing_class
        ids, labels = batch["input_ids"][0], batch["labels"][0]
        return tokenizer.decode(ids[labels != -100]), tokenizer.decode(ids[batch["attention_mask"][0] == 1])

    learned, whole = labelled_text({})
    answers = re.findall(r"<\|im_start\|>assistant\n(.*?<\|im_end\|>\n)", whole, re.DOTALL)
    assert len(answers) == 2 and learned == "".join(answers)  # both assistant turns of the row, nothing else
    learned, whole = labelled_text({"assistant_only_loss": False})
    assert learned == whole


@pytest.mark.slow
def test_sigterm_checkpoints_then_resume_continues_at_the_next_step_and_merges(tmp_path):
    """A second architecture (Llama), LoRA: SIGTERM after a step, a checkpoint, --resume auto at the next step."""
    from vlmgrpo.models.tiny import make_tiny

    llama = make_tiny(tmp_path / "llama", rows=8, family="llama")
    output = tmp_path / "out"
    command = ["-m", "vlmgrpo", *map(str, sft_args(llama, output, "--max-steps", "200", "--save-steps", "1000", *LORA))]
    code, stderr = run_until_step_then_signal([sys.executable, *command], step=1)
    assert code == 143, stderr[-3000:]
    (checkpoint,) = output.glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert (checkpoint / "adapter_model.safetensors").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert not (output / "adapter").exists()  # not finished
    result = vlmgrpo(*sft_args(llama, output, "--max-steps", str(step + 1), "--resume", "auto", *LORA,
                               "--set", "merge_lora=true"), check=True)
    assert result.stdout.splitlines()[0].startswith(f"step {step + 1}/{step + 1} ")
    assert [m["step"] for m in read_jsonl(output / "metrics.jsonl")] == list(range(1, step + 2))
    assert (output / "merged" / "model.safetensors").is_file()


@pytest.mark.slow
def test_two_processes_through_torchrun(tiny_text, tmp_path):
    output = tmp_path / "out"
    result = vlmgrpo(*sft_args(tiny_text, output, "--max-steps", "2", "--save-steps", "2", "--batch-size", "2", *LORA,
                               "--nproc-per-node", "2", "--master-port", free_port()), check=True)
    assert "torch.distributed.run --nproc-per-node=2" in result.stderr
    assert [m["step"] for m in read_jsonl(output / "metrics.jsonl")] == [1, 2]
    assert torch.load(output / "checkpoint-2" / "training_args.bin", weights_only=False).world_size == 2


def distance(a: dict, b: dict) -> float:
    return sum((a[name].float() - b[name].float()).norm().item() for name in a)


@pytest.mark.slow
def test_sft_then_grpo_example_runs_on_cpu(tmp_path):
    """examples/: LoRA SFT of the tiny vision-language model on its image rows, merged, then GRPO from the merge (and
    from the adapter). Its time on a CPU is measured in bench/ (section 7)."""
    work = tmp_path / "examples"
    work.mkdir()
    for name in ("sft_tiny.yaml", "rec_tiny.yaml"):
        shutil.copy(REPO / "examples" / name, work)
    vlmgrpo("make-tiny", "--out", work / "tiny", check=True)
    sft_output, grpo_output = tmp_path / "sft", tmp_path / "grpo"
    vlmgrpo("sft", "--config", work / "sft_tiny.yaml", "--output", sft_output, check=True)
    result = vlmgrpo("train", "--config", work / "rec_tiny.yaml", "--model", sft_output / "merged",
                     "--output", grpo_output, check=True)
    sft_metrics = read_jsonl(sft_output / "metrics.jsonl")
    assert [m["step"] for m in sft_metrics if "eval_loss" in m] == [4, 8]
    assert "step 8/8" in result.stdout
    base = load_file(str(work / "tiny" / "model" / "model.safetensors"))
    merged, grpo = (load_file(str(path / "model.safetensors")) for path in (sft_output / "merged", grpo_output))
    assert distance(grpo, merged) < distance(grpo, base) / 10  # GRPO went on from the SFT model
    adapter_run = vlmgrpo("train", "--config", work / "rec_tiny.yaml", "--adapter", sft_output / "adapter",
                          "--set", "use_lora=true", "--output", tmp_path / "from-adapter", "--max-steps", "1",
                          check=True)
    assert "step 1/1" in adapter_run.stdout
    assert (tmp_path / "from-adapter" / "adapter" / "adapter_model.safetensors").is_file()


def test_qlora_settings_become_the_4bit_loading_arguments():
    from vlmgrpo.config.model_config import ModelConfig
    from vlmgrpo.models.loading import quantization

    assert quantization(ModelConfig(), torch.bfloat16) == {}
    loading = quantization(ModelConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4", use_bnb_nested_quant=False),
                           torch.bfloat16)
    settings = loading["quantization_config"]
    assert settings.load_in_4bit and settings.bnb_4bit_quant_type == "fp4" and not settings.bnb_4bit_use_double_quant
    assert settings.bnb_4bit_compute_dtype == torch.bfloat16 and loading["device_map"] == {"": 0}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("bitsandbytes") is None,
                    reason="QLoRA needs a CUDA GPU and bitsandbytes (not on this machine)")
def test_qlora_trains_on_a_gpu_and_logs_peak_memory_per_step(tiny_text, tmp_path):
    output = tmp_path / "out"
    vlmgrpo(*sft_args(tiny_text, output, "--max-steps", "2", *LORA, "--set", "load_in_4bit=true",
                      "--set", "merge_lora=true"), check=True)
    metrics = read_jsonl(output / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and all(m["gpu_memory_peak_gib"] > 0 for m in metrics)
    assert (output / "adapter" / "adapter_model.safetensors").is_file()
    assert (output / "merged" / "model.safetensors").is_file()
