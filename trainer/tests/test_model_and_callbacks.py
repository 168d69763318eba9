import json
import re

import torch
from PIL import Image
import pytest
from safetensors.torch import load_file

from click.testing import CliRunner

from conftest import TESTS, read_jsonl, vlmgrpo
from vlmgrpo.commands.cli import main
from vlmgrpo.training.callbacks import GracefulStop, MetricsLogger, ZeroRewardWatchdog
from vlmgrpo.errors import ConfigError
from vlmgrpo.commands.grpo import GRPO
from vlmgrpo.monitoring.metrics import format_line
from vlmgrpo.models.attention import choose_attention
from vlmgrpo.models.loading import answer_box_space, choose_dtype
from vlmgrpo.rewards import build_rewards


class State:
    is_world_process_zero = True
    global_step = 1
    max_steps = 10


def train_with_a_frozen_vision_tower(tmp_path, family, vision_prefix, language_prefix) -> dict:
    """Two steps of a tiny model of the family with freeze_vision_tower: the vision weights (saved under
    vision_prefix) stay as they were, the language model's change."""
    from vlmgrpo.models.tiny import make_tiny

    tiny = make_tiny(tmp_path / "tiny", rows=4, family=family)
    output = tmp_path / "out"
    vlmgrpo("train", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
            "--output", output, "--max-steps", "2", "--num-generations", "2", "--batch-size", "4",
            "--max-completion-length", "8", "--set", "gradient_accumulation_steps=1", "--set", "learning_rate=0.01",
            "--set", "freeze_vision_tower=true",
            "--set", f"reward_funcs=[iou, format, {TESTS / 'shaping.py'}:token_sum]", check=True)
    before = load_file(f"{tiny['model']}/model.safetensors")
    after = load_file(str(output / "model.safetensors"))
    vision = [name for name in before if name.startswith(vision_prefix)]
    language = [name for name in before if name.startswith(language_prefix)]
    assert vision and language
    assert all(torch.equal(before[name], after[name]) for name in vision)
    assert any(not torch.equal(before[name], after[name]) for name in language)
    assert len(read_jsonl(output / "metrics.jsonl")) == 2
    return tiny


@pytest.mark.slow  # 11.3 s on its own here (makes and trains a Qwen2-VL)
def test_qwen2_vl_with_frozen_vision_tower_trains_only_the_language_model(tmp_path):
    train_with_a_frozen_vision_tower(tmp_path, "qwen2_vl", "visual.", "model.layers.")


@pytest.mark.slow
def test_internvl_trains_with_its_tiles_and_scores_in_norm1000(tmp_path):
    """A second family: InternVL (vision tower, pixel-shuffle projector, Qwen2 language model), images cut into
    tiles; it answers boxes in 0-1000 coordinates."""
    tiny = train_with_a_frozen_vision_tower(tmp_path, "internvl", "vision_tower.", "language_model.")
    common = ["--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"]]
    row = read_jsonl(tiny["data"])[0]
    width, height = Image.open(f"{tiny['image_root']}/{row['image']}").size
    x1, y1, x2, y2 = json.loads(row["conversations"][1]["value"])["bbox_2d"]
    norm1000 = [round(x1 * 1000 / width), round(y1 * 1000 / height), round(x2 * 1000 / width),
                round(y2 * 1000 / height)]
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": row["id"], "completion": f'<think>t</think><answer>{{"bbox_2d": '
                                                                      f'{norm1000}}}</answer>'}))
    scored = json.loads(vlmgrpo("score", *common, "--completions", completions, check=True).stdout)
    assert scored["rewards"]["format"] == 1.0 and scored["rewards"]["iou"] > 0.9


def test_cpu_defaults():
    assert choose_attention("auto") == "sdpa"  # no GPU here
    assert choose_attention("eager") == "eager"
    assert choose_dtype("auto") == torch.float32
    assert answer_box_space("auto", "qwen2_5_vl") == "resized"
    assert answer_box_space("auto", "qwen2_vl") == "norm1000"
    assert answer_box_space("auto", "internvl") == "norm1000"


def test_watchdog_warns_after_patience_and_names_what_to_check():
    watchdog = ZeroRewardWatchdog(patience=3)
    zero = {"reward": 0.0, "rewards/iou/mean": 0.0, "rewards/format/mean": 0.5, "frac_reward_zero_std": 1.0}
    for _ in range(2):
        watchdog.on_log(None, State(), None, logs=zero)
    assert not watchdog.warnings
    watchdog.on_log(None, State(), None, logs=zero)
    assert len(watchdog.warnings) == 2
    assert "reward 'iou' has been 0 for 3" in watchdog.warnings[0]
    assert "box_space" in watchdog.warnings[0] and "answer format" in watchdog.warnings[0]
    assert "zero reward std" in watchdog.warnings[1]
    moving = {"reward": 0.3, "rewards/iou/mean": 0.3, "frac_reward_zero_std": 0.5}
    watchdog.on_log(None, State(), None, logs=moving)
    assert watchdog.zero_streak["iou"] == 0 and watchdog.flat_streak == 0


def test_metrics_line_is_concise(tmp_path):
    logger = MetricsLogger(tmp_path / "metrics.jsonl", GRPO.metrics)
    logs = {"reward": 0.5, "reward_std": 0.1, "rewards/iou/mean": 0.4, "rewards/format/mean": 1.0, "kl": 0.002,
            "completions/mean_length": 80.0, "learning_rate": 1e-6, "loss": 0.01}
    logger.on_log(None, State(), None, logs=logs)
    record = read_jsonl(tmp_path / "metrics.jsonl")[0]
    assert record["rewards"] == {"iou": 0.4, "format": 1.0} and record["completion_length"] == 80.0
    line = format_line(record, 10, GRPO.metrics)
    assert line.startswith("step 1/10 reward=0.5 std=0.1 [iou=0.4 format=1]") and "\n" not in line


def test_graceful_stop_exit_codes():
    stop = GracefulStop()
    assert stop.exit_code == 0
    stop.signal_number = 15
    assert stop.exit_code == 143


@pytest.mark.parametrize("name,message", [
    ("nonexistent_module_xyz:f", "cannot import nonexistent_module_xyz"),
    ("os:not_a_function", "os has no function not_a_function"),
    ("just_a_name", "unknown reward 'just_a_name'; use one of iou, format, iou_lenient, format_lenient"),
    ("iuo", "unknown reward 'iuo' (did you mean iou?)"),
])
def test_bad_custom_reward_is_a_config_error(name, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_rewards([name], "absolute", None, None)


def test_custom_reward_from_file_keeps_its_name():
    (reward,) = build_rewards([f"{TESTS / 'shaping.py'}:token_sum"], "absolute", None, None)
    assert reward.__name__ == "token_sum"
    assert reward(prompts=[0], completions=[0], completion_ids=[[1, 2]]) == [0.03]


def test_resume_path_that_is_not_a_checkpoint(tmp_path, tiny):
    for dry_run in (["--dry-run"], []):
        result = CliRunner().invoke(main, ["train", "--model", tiny["model"], "--data", tiny["data"], "--image-root",
                                           tiny["image_root"], "--output", str(tmp_path / "o"), "--resume",
                                           str(tmp_path), "--num-generations", "2", "--batch-size", "2", *dry_run])
        assert result.exit_code == 2 and "not a checkpoint directory" in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_a_signal_before_training_exits_at_once(tmp_path):
    """`docker stop` while the data is checked or the model loads: vlmgrpo is the container's PID 1, which would
    ignore SIGTERM without a handler; it exits 143 at once instead, as there is nothing to checkpoint yet."""
    import signal
    import subprocess
    import sys

    from conftest import ENV

    code = ("import sys, time\nfrom vlmgrpo.launch.torchrun import exit_on_signal_until_training\n"
            "exit_on_signal_until_training()\nprint('ready', flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=ENV)
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 143
    assert "received SIGTERM before training started: nothing to checkpoint yet, exiting" in stderr


def test_a_checkpoint_is_damaged_when_cut_short_missing_a_file_or_once_failed_to_load(tmp_path):
    from safetensors.torch import save_file
    from vlmgrpo.training.checkpoint import LOAD_FAILED, damage, foreign, resolve_resume, run_identity, write_record

    output = tmp_path / "out"
    for step in (1, 2):
        checkpoint = output / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        save_file({"w": torch.zeros(64)}, str(checkpoint / "model.safetensors"))
        (checkpoint / "trainer_state.json").write_text('{"global_step": %d}' % step)
        write_record(str(checkpoint), run_identity("train", "some/model"))
    newest = output / "checkpoint-2"
    assert damage(str(newest)) is None and foreign(str(newest), run_identity("train", "some/model")) is None
    assert "another/model" in foreign(str(newest), run_identity("train", "another/model"))
    assert "`sft`" in foreign(str(newest), run_identity("sft", "some/model"))
    (newest / "trainer_state.json").write_text('{"global_step": 2} ')
    assert damage(str(newest)) == "trainer_state.json is 19 bytes, 18 when it was saved"
    (newest / "trainer_state.json").write_text('{"global_step": 2}')
    (newest / LOAD_FAILED).write_text("")
    assert damage(str(newest)) == "its weights failed to load before"
    assert resolve_resume("auto", str(output), run_identity("train", "some/model")) == str(output / "checkpoint-1")
    (newest / LOAD_FAILED).unlink()
    (newest / "vlmgrpo_checkpoint.json").unlink()  # an earlier vlmgrpo's checkpoint: its safetensors header speaks
    data = (newest / "model.safetensors").read_bytes()
    (newest / "model.safetensors").write_bytes(data[:-10])
    assert damage(str(newest)) == "model.safetensors is shorter than its header says"


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_tiny_model_config_takes_a_head_size(tmp_path, family):
    """The tiny model's heads are 16 wide; flash-attention 4's kernels take 64 to 256, so a GPU run of them makes the
    same model with heads of 128: every attention (text and vision) has heads of that size, M-RoPE still sums."""
    from vlmgrpo.models.tiny import make_model_config, make_tokenizer

    tokenizer = make_tokenizer(tmp_path)
    for head_dim in (16, 128):
        config = make_model_config(tokenizer, family, head_dim=head_dim)
        text, vision = config.text_config, config.vision_config
        assert text.hidden_size // text.num_attention_heads == head_dim
        assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2
        vision_width = vision.embed_dim if family == "qwen2_vl" else vision.hidden_size
        assert vision_width // vision.num_heads == head_dim
    assert make_model_config(tokenizer, family).text_config.hidden_size == 64  # the default tiny model, unchanged
    with pytest.raises(ValueError, match="head_dim 24: a multiple of 16"):
        make_model_config(tokenizer, family, head_dim=24)
