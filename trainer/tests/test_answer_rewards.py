"""VLM-R1's rewards for text answers (vlmgrpo/answer_rewards.py) against VLM-R1's own values: data/
vlm_r1_answer_rewards.json was computed by running VLM-R1's functions (the commit is in the file), not ours; and a
real GRPO run on multiple-choice rows with no box, scored by them."""

import json
from pathlib import Path

import pytest

from conftest import read_jsonl, vlmgrpo
from vlmgrpo.answer_rewards import ANSWER_REWARD_FUNCS, choice_of
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards import build_rewards

TABLE = json.loads((Path(__file__).parent / "data" / "vlm_r1_answer_rewards.json").read_text())


def test_the_table_names_the_commit_its_values_come_from():
    assert "om-ai-lab/VLM-R1 at 90052f478646e38bc67363862f699b7afca6b337" in TABLE["source"]
    assert {row["method"] for row in TABLE["rows"]} == {"mcq", "yes_no", "all_match", "format_answer"}


@pytest.mark.parametrize("row", TABLE["rows"], ids=lambda row: f"{row['method']}:{row['completion'][:30]!r}")
def test_each_reward_gives_vlm_r1_s_value(row):
    reward = ANSWER_REWARD_FUNCS[row["method"]]
    completion = [{"role": "assistant", "content": row["completion"]}]  # as TRL passes a conversational one
    assert reward(prompts=[None], completions=[completion], answer=[row["solution"]]) == [row["reward"]]


def test_a_choice_named_among_others_is_found_by_its_words():
    assert choice_of("I think the correct answer is C, not A.") == "C"
    # VLM-R1 scores a letter where it first appears: the B of "It is B." is scored at "B or", so A's comma wins
    assert choice_of("A, B or C? It is B.") == "A"
    assert choice_of("no letter here") is None


def test_they_are_built_in_rewards_by_name_and_a_near_miss_says_so():
    built = build_rewards(["mcq", "yes_no", "all_match", "format_answer"], "absolute", None, None)
    assert [reward.__name__ for reward in built] == ["mcq", "yes_no", "all_match", "format_answer"]
    with pytest.raises(ConfigError, match="did you mean yes_no"):
        build_rewards(["yes_noo"], "absolute", None, None)


@pytest.mark.slow
def test_grpo_trains_on_multiple_choice_rows_without_a_box(tiny, tmp_path):
    """Two real GRPO steps on the tiny model: rows whose answer is a letter, no box anywhere, scored by mcq and
    format_answer; the box rewards' check of every row does not apply."""
    rows = tmp_path / "mcq.jsonl"
    images = sorted(Path(tiny["image_root"]).glob("*.png"))[:4]
    with rows.open("w") as out:
        for i, image in enumerate(images):
            question = "<image>What colour is the rectangle? A. yellow B. blue C. red"
            out.write(json.dumps({"image": image.name, "conversations": [
                {"from": "human", "value": question}, {"from": "gpt", "value": f"<answer>{'ABC'[i % 3]}</answer>"}]})
                + "\n")
    output = tmp_path / "out"
    vlmgrpo("train", "--model", tiny["model"], "--data", rows, "--image-root", tiny["image_root"], "--output", output,
            "--num-generations", "2", "--batch-size", "2", "--max-completion-length", "8", "--max-steps", "2",
            "--save-steps", "100", "--set", "reward_funcs=[mcq, format_answer]",
            "--set", "question_template={Question} Answer with the letter in <answer> </answer> tags.", check=True)
    metrics = read_jsonl(output / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert set(metrics[-1]["rewards"]) == {"mcq", "format_answer"}
    assert all(0.0 <= value <= 1.0 for m in metrics for value in m["rewards"].values())
