"""The reward name `accuracy` as VLM-R1's grpo_jsonl.py means it: per row (each row's accu_reward_method, else
--reward_method, else default) unless is_reward_customized_from_vlm_module is true, where the model module's reward
(IoU for REC on Qwen and InternVL) takes its place; VLM-R1's default for the flag is false. REC's IoU keeps its own
name, `iou`. The meaning is said at start and in --print-config."""

import logging

import pytest

from conftest import in_process
from vlm_r1_table import IMAGES, TABLE
from vlmgrpo.boxes import RESIZED
from vlmgrpo.commands.flags import parse_flags
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.config.load import build_config
from vlmgrpo.rewards import build_rewards

GRPO = RECIPES["train"]
FLAG = "--is_reward_customized_from_vlm_module"
PER_ROW = "accuracy = jsonl_accuracy: per row (accu_reward_method, else reward_method all_match, else default)"
# The tiny Qwen2.5-VL processor's input sizes for the table's two images (vlm_r1_table.py's docstring).
INPUT_SIZES = {(200, 100): (140, 56), (30, 20): (28, 28)}


def config_of(*words):
    overrides, _ = parse_flags(list(words), GRPO)
    return build_config({}, "command line", overrides, GRPO)


def accuracy_of(config):
    """The reward the config's first name (accuracy) became, built as train builds it."""
    resize = lambda width, height: INPUT_SIZES[(width, height)]  # noqa: E731
    return build_rewards(config.reward.reward_funcs, RESIZED, resize, None)[0]


@pytest.mark.parametrize("flag", [[], [FLAG, "False"], [FLAG, "false"]], ids=["unset", "False", "false"])
def test_accuracy_without_the_flag_or_with_false_is_each_row_s_method(flag):
    config = config_of("--reward_funcs", "accuracy", "format", "--reward_method", "all_match", *flag)
    reward = accuracy_of(config)
    assert reward.__name__ == "jsonl_accuracy"
    # Text answers, no box in them: each row's own method, else reward_method (all_match), as VLM-R1 scores them.
    completions = ["<think>same</think><answer>Yes</answer>", "<think>differ</think><answer>yes</answer>",
                   "<think>x</think><answer>B.</answer>", "<think>x</think><answer>B</answer>"]
    scores = reward(prompts=[None] * 4, completions=completions, answer=["yes", "no", "B", "(B)"],
                    accu_reward_method=["all_match", "all_match", "mcq", "all_match"])
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert config.notes["reward_funcs"].startswith(PER_ROW)


def test_accuracy_with_the_flag_true_is_the_model_module_s_iou_with_vlm_r1_s_numbers():
    config = config_of("--reward_funcs", "accuracy", "format", FLAG, "True")
    assert config.reward.reward_funcs == ["iou", "format"]
    reward = accuracy_of(config)
    scores = reward(prompts=[None] * len(TABLE), completions=[text for _, text, *_ in TABLE],
                    solution=[IMAGES[row][1] for row, *_ in TABLE], image_size=[IMAGES[row][0] for row, *_ in TABLE])
    for score, (_, text, expected_iou, _, why) in zip(scores, TABLE):
        assert score == pytest.approx(expected_iou, abs=0.01), why
    assert config.notes["reward_funcs"].startswith("accuracy = iou: IoU of the answered box with the label")


@pytest.mark.parametrize("flag", [[], [FLAG, "False"], [FLAG, "True"]], ids=["unset", "False", "True"])
def test_iou_is_rec_s_iou_under_any_flag(flag):
    config = config_of("--reward_funcs", "iou", "format", *flag)
    assert config.reward.reward_funcs == (["iou", "format_answer"] if flag[1:] == ["False"] else ["iou", "format"])
    assert "iou" not in config.notes.get("reward_funcs", "")  # nothing was renamed to it


def test_the_meaning_is_one_line_at_start_and_in_print_config():
    from vlmgrpo.commands.cli import setup_logging

    setup_logging()  # the command's own handler first, so that ours is an addition, not the only one
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("vlmgrpo").addHandler(handler)
    try:
        result = in_process("train", "--reward_funcs", "accuracy", "format", "--reward_method", "all_match",
                            "--print-config", check=True)
    finally:
        logging.getLogger("vlmgrpo").removeHandler(handler)
    (line,) = [record.getMessage() for record in records if "accuracy" in record.getMessage()]
    assert line.startswith(f"reward {PER_ROW}"), line
    assert "is_reward_customized_from_vlm_module unset, VLM-R1's default false" in line
    assert "REC's IoU is the reward iou, or set is_reward_customized_from_vlm_module true" in line
    assert "format stays REC's format" in line
    printed = result.stdout
    assert "\nreward_funcs: [jsonl_accuracy, format]\n" in printed
    above = printed[:printed.index("\nreward_funcs:")].rsplit("\n# Resolved: ", 1)[1]
    assert " ".join(above.replace("\n# ", " ").split()).startswith(PER_ROW)
