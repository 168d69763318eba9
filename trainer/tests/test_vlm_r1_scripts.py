"""VLM-R1's six run scripts' arguments after `vlmgrpo train`, paths bound to the tiny model and data
(vlm_r1_scripts.py holds them, with their source)."""

import importlib.util
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import in_process
from vlm_r1_scripts import GUI, SCRIPTS

# VLM-R1's own DeepSpeed files (src/open-r1-multimodal/local_scripts/zero{2,3}.json), "auto" values and all: the HF
# integration fills those in, so the trainer takes them as they are.
ZERO = {
    "zero2": {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "optimizer": {"type": "AdamW", "params": {
        "lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "none", "pin_memory": True}, "allgather_partitions": True,
        "allgather_bucket_size": 2e8, "overlap_comm": False, "reduce_scatter": True, "reduce_bucket_size": 2e8,
        "contiguous_gradients": True}, "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        "steps_per_print": 100, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "wall_clock_breakdown": False},
    "zero3": {"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}, "optimizer": {"type": "AdamW", "params": {
        "lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "none", "pin_memory": True}, "offload_param": {
            "device": "none", "pin_memory": True}, "overlap_comm": True, "contiguous_gradients": True,
        "sub_group_size": 1e9, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True},
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 100,
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False},
}
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.fixture(scope="module")
def tiny16(tmp_path_factory):
    """16 rows: the REC scripts' generation batch on 8 GPUs is 16 prompts (8 per device x 8 x 2 steps / 8)."""
    from vlmgrpo.models.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("tiny16"), rows=16)


def script_args(name: str, tiny, tmp_path: Path) -> list[str]:
    import json

    for zero, config in ZERO.items():
        (tmp_path / f"{zero}.json").write_text(json.dumps(config))
    data = Path(tiny["data"]).parent
    bound = SCRIPTS[name].format(
        model_path=tiny["model"], output_dir=tmp_path / "out", image_folders=tiny["image_root"],
        data_paths=data / "tasks" / "gui.jsonl" if name in GUI else tiny["data"],
        zero2=tmp_path / "zero2.json", zero3=tmp_path / "zero3.json")
    words = shlex.split(bound)  # as the shell passes them: quotes gone
    if not HAS_DEEPSPEED:  # no DeepSpeed here (the images have it): its file is still checked, by the next test
        index = words.index("--deepspeed")
        del words[index:index + 2]
    return words


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_vlm_r1_script_arguments_pass_train_dry_run(name, tiny16, tmp_path, caplog):
    """Checked for 8 GPUs on this machine: the batch arithmetic of the declared world size, every row, rewards."""
    result = in_process("train", *script_args(name, tiny16, tmp_path), "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "total: 16 rows, " in result.stdout
    # The log's handler writes to the stderr of the first command run in this process, later ones reach caplog.
    said = result.stderr + caplog.text
    assert "grpo_jsonl.py: ignored" in said and "--dataset-name: ignored" in said
    meaning = "accuracy = jsonl_accuracy" if name in GUI else "accuracy = iou"
    assert meaning in said, said[-3000:]


def test_the_gui_script_without_the_flag_scores_accuracy_by_all_match_per_row(tiny16, tmp_path):
    """run_grpo_gui.sh's arguments less --is_reward_customized_from_vlm_module False, which is VLM-R1's default:
    accuracy is still each row's method, reward_method all_match, on the GUI rows' yes/no answers (no box in them)."""
    from vlmgrpo.commands.flags import parse_flags
    from vlmgrpo.commands.training import RECIPES
    from vlmgrpo.config.load import build_config
    from vlmgrpo.rewards import build_rewards
    from vlmgrpo.data.rows import load_checked_data

    words = script_args("run_grpo_gui.sh", tiny16, tmp_path)
    at = words.index("--is_reward_customized_from_vlm_module")
    del words[at:at + 2]
    result = in_process("train", *words, "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]  # was: "cannot parse a box [x1, y1, x2, y2]" at row 1
    overrides, _ = parse_flags(words, RECIPES["train"])
    config = build_config({}, "command line", overrides, RECIPES["train"])
    assert config.reward.reward_funcs[0] == "jsonl_accuracy"
    rows = load_checked_data(config).samples
    accuracy = build_rewards(config.reward.reward_funcs, "absolute", None, None)[0]
    right = [f"<think>compared</think><answer>{row.answer.capitalize()}.</answer>" for row in rows]
    wrong = [f"<think>compared</think><answer>{'no' if row.answer == 'yes' else 'yes'}</answer>" for row in rows]
    columns = {"answer": [row.answer for row in rows], "accu_reward_method": [row.reward_method for row in rows]}
    assert {row.reward_method for row in rows} == {"all_match"} and {row.answer for row in rows} <= {"yes", "no"}
    assert accuracy(prompts=[None] * len(rows), completions=right, **columns) == [1.0] * len(rows)
    assert accuracy(prompts=[None] * len(rows), completions=wrong, **columns) == [0.0] * len(rows)


def test_the_rec_script_without_the_flag_warns_that_its_boxes_are_not_scored_by_iou(tiny16, tmp_path):
    """A REC config that says accuracy without is_reward_customized_from_vlm_module meant IoU here before accuracy
    followed VLM-R1 (per row, method default): the run still starts, and says how to get IoU back."""
    import logging

    from vlmgrpo.commands.cli import setup_logging

    setup_logging()  # the command's own handler first, so that ours is an addition, not the only one
    words = script_args("run_grpo_rec.sh", tiny16, tmp_path)
    at = words.index("--is_reward_customized_from_vlm_module")
    del words[at:at + 2]
    records = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append
    logging.getLogger("vlmgrpo").addHandler(handler)
    try:
        result = in_process("train", *words, "--dry-run")
    finally:
        logging.getLogger("vlmgrpo").removeHandler(handler)
    assert result.returncode == 0, result.stderr[-3000:]
    (warning,) = [record.getMessage() for record in records if "reward 'accuracy'" in record.getMessage()]
    assert "scores 16 of 16 rows, whose answers are boxes, by the default method" in warning
    assert warning.endswith("for REC's IoU write the reward iou, or set is_reward_customized_from_vlm_module true")


def test_vlm_r1_deepspeed_files_are_taken_as_they_are(tmp_path):
    from vlmgrpo.launch.torchrun import resolve_deepspeed

    import json

    for zero, config in ZERO.items():
        path = tmp_path / f"{zero}.json"
        path.write_text(json.dumps(config))
        assert resolve_deepspeed(str(path)) == str(path)


def without(words: list[str], flags: list[str]) -> list[str]:
    """The script's words less the flags given (`--flag value` or `--flag=value`): the command line refuses a key
    given twice, so a value is changed by replacing it, as a user edits the line."""
    kept, skip = [], False
    for index, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word.split("=")[0] in flags:
            following = words[index + 1] if index + 1 < len(words) else ""
            skip = "=" not in word and not following.startswith("--") and not following.endswith(".py")
            continue
        kept.append(word)
    return kept


@pytest.mark.slow
@pytest.mark.parametrize("name", ["run_grpo_rec.sh", "run_grpo_gui.sh"])
def test_vlm_r1_script_runs_two_steps_on_one_process(name, tiny16, tmp_path):
    """The world size cut to 1 and the sizes to the tiny model's; every other flag as written."""
    import sys

    from conftest import ENV

    words = script_args(name, tiny16, tmp_path)
    index = words.index("--deepspeed") if "--deepspeed" in words else None
    if index is not None:  # DeepSpeed on one CPU process is not the point here
        del words[index:index + 2]
    small = ["--nproc_per_node", "1", "--per_device_train_batch_size", "4", "--num_generations", "4",
             "--gradient_accumulation_steps", "1", "--max_completion_length", "12", "--max_steps", "2",
             "--report_to", "none", "--bf16", "false", "--attn_implementation", "sdpa"]
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", "train", *without(words, small[::2]), *small],
                            capture_output=True, text=True, timeout=900, env=ENV)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "out" / "metrics.jsonl").exists()


def test_report_to_wandb_without_a_key_runs_offline_into_the_output(monkeypatch, tmp_path):
    from vlmgrpo.training.started import wandb_offline_without_key

    for name in ("WANDB_MODE", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "out"))
    wandb_offline_without_key()
    assert os.environ["WANDB_MODE"] == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "k")
    wandb_offline_without_key()
    assert os.environ["WANDB_MODE"] == "online"
