"""VLM-R1's rewards for text answers (vlmgrpo/rewards/answer.py) against VLM-R1's own values: data/
vlm_r1_answer_rewards.json was computed by running VLM-R1's functions (the commit is in the file), not ours; and a
real GRPO run on multiple-choice rows with no box, scored by them."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import in_process, read_jsonl, vlmgrpo
from vlmgrpo.rewards.accuracy import SCORES, jsonl_accuracy, method_problem, vlm_r1_solution
from vlmgrpo.rewards.answer import ANSWER_REWARD_FUNCS, choice_of
from vlmgrpo.rewards.detection import weighted_sum_score
from vlmgrpo.errors import ConfigError
from vlmgrpo.rewards import build_rewards

TABLE = json.loads((Path(__file__).parent / "data" / "vlm_r1_answer_rewards.json").read_text())
SCORED = [row for row in TABLE["rows"] if "reward" in row]
# Where VLM-R1 raises (and a training run stops), vlmgrpo gives a number; these are ours, said in detection_rewards.
OURS_WHERE_VLM_R1_RAISES = {"UnboundLocalError": 0.3 * 0.75, "JSONDecodeError": 0.0}


def test_the_table_names_the_commit_its_values_come_from():
    assert "om-ai-lab/VLM-R1 at 90052f478646e38bc67363862f699b7afca6b337" in TABLE["source"]
    assert {row["method"] for row in TABLE["rows"]} == {"mcq", "yes_no", "all_match", "format_answer",
                                                         "weighted_sum", "default", "math", "map", "od_ap",
                                                         "od_ap50", "odLength", "length", "repetition"}


@pytest.mark.parametrize("row", [row for row in SCORED if row["method"] in ANSWER_REWARD_FUNCS],
                         ids=lambda row: f"{row['method']}:{row['completion'][:30]!r}")
def test_each_reward_gives_vlm_r1_s_value(row):
    reward = ANSWER_REWARD_FUNCS[row["method"]]
    completion = [{"role": "assistant", "content": row["completion"]}]  # as TRL passes a conversational one
    assert reward(prompts=[None], completions=[completion], answer=[row["solution"]]) == [row["reward"]]


def test_weighted_sum_gives_vlm_r1_s_value_to_the_bit_and_a_number_where_vlm_r1_raises():
    rows = [row for row in TABLE["rows"] if row["method"] == "weighted_sum"]
    assert len(rows) > 30
    for row in rows:
        expected = row["reward"] if "reward" in row else OURS_WHERE_VLM_R1_RAISES[row["vlm_r1_raises"]]
        assert weighted_sum_score(row["completion"], vlm_r1_solution(row["solution"])) == pytest.approx(expected,
                                                                                                        abs=0), row


LIBRARY_METHODS = ("default", "math", "map", "od_ap", "od_ap50", "odLength")


@pytest.mark.parametrize("row", [row for row in TABLE["rows"] if row["method"] in LIBRARY_METHODS],
                         ids=lambda row: f"{row['method']}:{row['completion'][:30]!r}")
def test_the_methods_on_math_verify_levenshtein_and_pycocotools_give_vlm_r1_s_value(row):
    """The label as grpo_jsonl.py's solution column holds it (vlm_r1_solution); 0.0 where VLM-R1 raises on a
    label it cannot read."""
    expected = row["reward"] if "reward" in row else 0.0
    assert SCORES[row["method"]](row["completion"], vlm_r1_solution(row["solution"])) == expected


def test_length_and_repetition_give_vlm_r1_s_value():
    """The table counts one token per character (tokens); the reward encodes the completion with the model's
    tokenizer, as VLM-R1 does."""
    from vlmgrpo.rewards.shaping import length_score, make_length_reward, repetition_reward

    rows = [row for row in TABLE["rows"] if row["method"] in ("length", "repetition")]
    assert {row["method"] for row in rows} == {"length", "repetition"} and all("reward" in row for row in rows)
    for row in rows:
        got = length_score(row["tokens"]) if row["method"] == "length" else \
            repetition_reward(prompts=[None], completions=[[{"role": "assistant", "content": row["completion"]}]])[0]
        assert got == row["reward"], row

    class Characters:
        @staticmethod
        def encode(text):
            return list(text)
    length = make_length_reward(Characters)
    assert length.__name__ == "length" and length(prompts=[None], completions=["x" * 1024]) == [0.5]


def test_task_type_picks_vlm_r1_s_question_template_unless_one_is_given(tmp_path):
    from vlmgrpo.commands.training import RECIPES
    from vlmgrpo.config.load import load_config
    from vlmgrpo.config.template import REC_QUESTION_TEMPLATE, TASK_DEFAULT_TEMPLATE

    def template(**overrides):
        return load_config(None, overrides, RECIPES["train"]).data.question_template
    assert template() == REC_QUESTION_TEMPLATE  # the REC recipe's, as before
    assert template(task_type="gui") == template(task_type="default") == TASK_DEFAULT_TEMPLATE
    assert template(task_type="odLength").startswith("First thinks about") and \
        template(task_type="odLength").endswith("</answer>\n{question}")
    assert template(task_type="ic", question_template="{question}?") == "{question}?"  # given: it stands
    with pytest.raises(ConfigError, match="key 'task_type': 'ovd' is not one of: rec, ic, odLength, default, gui"):
        template(task_type="ovd")


def test_jsonl_accuracy_scores_each_row_by_its_own_method_on_the_label_without_its_tags():
    """One batch, four methods: each row gets its method's number, from the label as grpo_jsonl.py passes it (answer
    tags removed, then wrapped again: "<answer>a cat</answer> on a mat" is "<answer> a cat on a mat </answer>")."""
    methods = ("mcq", "yes_no", "all_match", "weighted_sum", "default", "math", "map", "od_ap", "od_ap50", "odLength")
    chosen = [next(row for row in SCORED if row["method"] == method and row["reward"] not in (0.0, 1.0))
              if method in ("weighted_sum", "default", "map", "od_ap", "odLength")
              else next(row for row in SCORED if row["method"] == method) for method in methods]
    completions = [[{"role": "assistant", "content": row["completion"]}] for row in chosen]
    got = jsonl_accuracy(prompts=[None] * len(chosen), completions=completions,
                         answer=[row["solution"] for row in chosen], accu_reward_method=list(methods))
    assert got == [row["reward"] for row in chosen]
    answered = ["<answer>A cat on a mat.</answer>", "<answer>a cat</answer>"]
    assert jsonl_accuracy(prompts=[None] * 2, completions=answered, answer=["<answer>a cat</answer> on a mat"] * 2,
                          accu_reward_method=["all_match"] * 2) == [1.0, 0.0]


def test_a_method_vlmgrpo_does_not_compute_yet_or_a_misspelt_one_is_named():
    methods = "default, mcq, yes_no, math, map, weighted_sum, od_ap, od_ap50, odLength, all_match, llm"
    assert all(method_problem(method) is None for method in methods.split(", "))
    assert method_problem("mcp") == f"accu_reward_method 'mcp' is not one of VLM-R1's; use one of: {methods}"


@pytest.mark.slow  # 16 s alone, most of it the first import of torch and TRL
def test_rows_judged_by_llm_need_a_judge_that_answers_before_any_weights_load(tmp_path):
    """--dry-run: no judge named, then one whose port nobody listens on: exit 2, one line each, nothing loaded (in
    this process: the line is the point; a real process's one-line errors are tested in test_preflight)."""
    import socket

    data = tmp_path / "judged.jsonl"
    data.write_text(json.dumps({"conversations": [{"from": "human", "value": "2+2?"},
                                                  {"from": "gpt", "value": "<answer>4</answer>"}],
                                "accu_reward_method": "llm"}) + "\n")
    model = tmp_path / "model"  # checked for config.json and readability, never loaded
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (model / "model.safetensors").write_bytes(b"not weights")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nobody listens there
    common = ("train", "--model", model, "--data", data, "--output", tmp_path / "out", "--dry-run",
              "--set", "reward_funcs=[jsonl_accuracy]")
    unset = in_process(*common)
    assert unset.returncode == 2 and "Traceback" not in unset.stderr
    assert unset.stderr.strip().endswith("key 'judge_url': rows are scored by the llm method (accu_reward_method): set "
                                         "judge_url and judge_model to the judge's OpenAI-compatible endpoint")
    closed = in_process(*common, "--set", f"judge_url=http://127.0.0.1:{port}/v1", "--set", "judge_model=judge")
    assert closed.returncode == 2 and "Traceback" not in closed.stderr and len(closed.stderr.strip().splitlines()) == 1
    assert f"key 'judge_url': the judge at http://127.0.0.1:{port}/v1 did not answer GET /models (APIConnectionError" \
        in closed.stderr


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
def test_grpo_trains_on_text_and_detection_rows_each_scored_by_its_method(tiny, tmp_path):
    """Four real GRPO steps on the tiny model, one pass over eight rows: answers that are a letter, a yes, a number, a
    phrase or a JSON list of boxes, and a two-image row (VLM-R1's GUI task), no REC box anywhere. mcq scores them
    all, jsonl_accuracy each by its method (the file's mcq, or the row's own: math-verify, Levenshtein and
    pycocotools run in training), format_answer, and VLM-R1's length and repetition shaping; the box rewards' check
    does not apply."""
    rows = tmp_path / "mixed.jsonl"
    images = sorted(Path(tiny["image_root"]).glob("*.png"))[:4]
    boxes = '```json\n[{"bbox_2d": [4, 4, 20, 20], "label": "rectangle"}]\n```'
    answers = [("<answer>A</answer>", None), ("<answer>B</answer>", None), ("<answer>yes</answer>", "yes_no"),
               (f"<answer>{boxes}</answer>", "weighted_sum"), ("<answer>4</answer>", "math"),
               ("<answer>a red rectangle</answer>", "default"), (f"<answer>{boxes}</answer>", "od_ap")]
    with rows.open("w") as out:
        for image, (answer, method) in zip(images + images, answers):
            question = "<image>What colour is the rectangle? A. yellow B. blue C. red"
            row = {"image": image.name, "conversations": [{"from": "human", "value": question},
                                                          {"from": "gpt", "value": answer}]}
            out.write(json.dumps({**row, **({"accu_reward_method": method} if method else {})}) + "\n")
        # VLM-R1's GUI task: two screenshots, one <image> each, answered yes or no (run_grpo_gui.sh: all_match)
        out.write(json.dumps({"image": [images[0].name, images[1].name], "accu_reward_method": "all_match",
                              "conversations": [{"from": "human", "value": "<image><image>Do the two screens differ?"},
                                                {"from": "gpt", "value": "<answer>yes</answer>"}]}) + "\n")
    output = tmp_path / "out"
    vlmgrpo("train", "--model", tiny["model"], "--data", rows, "--image-root", tiny["image_root"], "--output", output,
            "--num-generations", "2", "--batch-size", "2", "--max-completion-length", "8", "--max-steps", "4",
            "--save-steps", "100", "--set", "reward_funcs=[mcq, jsonl_accuracy, format_answer, length, repetition]",
            "--set", "reward_method=mcq", "--set", "dump_completions=true",
            "--set", "question_template={Question} Answer with the letter in <answer> </answer> tags.", check=True)
    metrics = read_jsonl(output / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    names = {"mcq", "jsonl_accuracy", "format_answer", "length", "repetition"}
    assert set(metrics[-1]["rewards"]) == names
    assert all(0.0 <= value <= 1.0 for m in metrics for value in m["rewards"].values())
    dumped = read_jsonl(output / "completions.jsonl")
    assert all(set(row["rewards"]) == names for row in dumped)
    assert all(0.5 <= row["rewards"]["length"] <= 1.0 for row in dumped)  # 8 tokens at most: near 1.0
    assert {row["row"] for row in dumped} == {f"{rows}:{line}" for line in range(1, 9)}  # every row, two images too


@pytest.mark.slow
@pytest.mark.parametrize("task, method", [("ovd", "od_ap"), ("math", "math"), ("mcq", "mcq"), ("gui", "all_match")])
def test_each_task_example_trains_two_steps_on_make_tiny_s_rows(task, method, tiny, tmp_path):
    """examples/<task>_tiny.yaml as a user runs it, next to make-tiny's output (its paths are relative to the file):
    two GRPO steps on the task's rows, each scored by the file's method through jsonl_accuracy."""
    from conftest import REPO

    work = tmp_path / "examples"
    work.mkdir()
    shutil.copy(REPO / "examples" / f"{task}_tiny.yaml", work)
    (work / "tiny").symlink_to(Path(tiny["model"]).parent)  # make-tiny's OUT: model/ and data/ (tasks/ inside)
    rows = read_jsonl(Path(tiny["image_root"]).parent / "tasks" / f"{task}.jsonl")
    assert len(rows) == 8 and all(len(row["conversations"]) == 2 for row in rows)
    output = tmp_path / "out"
    # mcq also holds out a quarter of its rows: the task's metric on them is logged as REC accuracy is
    held_out = ("--set", "val_split_ratio=0.25", "--set", "eval_steps=2") if task == "mcq" else ()
    result = vlmgrpo("train", "--config", work / f"{task}_tiny.yaml", "--output", output, "--max-steps", "2",
                     "--set", "dump_completions=true", *held_out, check=True)
    assert "step 2/2" in result.stdout and "jsonl_accuracy=" in result.stdout
    if held_out:
        evaluation = [m for m in read_jsonl(output / "metrics.jsonl") if m.get("eval_rewards")][-1]
        assert set(evaluation["eval_rewards"]) == {"jsonl_accuracy", "format_answer"}
        assert 0.0 <= evaluation["eval_rewards"]["jsonl_accuracy"] <= 1.0
    assert yaml.safe_load((work / f"{task}_tiny.yaml").read_text())["reward_method"] == method
    dumped = read_jsonl(output / "completions.jsonl")
    assert dumped and all(0.0 <= row["rewards"]["jsonl_accuracy"] <= 1.0 for row in dumped)


@pytest.mark.slow
def test_two_image_rows_train_on_internvl_too(tmp_path):
    """VLM-R1's GUI rows (two images, one <image> each) on InternVL, whose processor tiles each image: two GRPO
    steps, every row's two images checked before the weights load."""
    from vlmgrpo.models.tiny import make_tiny

    tiny = make_tiny(tmp_path / "tiny", rows=4, family="internvl")
    rows = Path(tiny["image_root"]).parent / "tasks" / "gui.jsonl"
    assert all(len(row["image"]) == 2 for row in read_jsonl(rows))
    result = vlmgrpo("train", "--model", tiny["model"], "--data", rows, "--image-root", tiny["image_root"], "--output",
                     tmp_path / "out", "--num-generations", "2", "--batch-size", "2", "--max-completion-length", "8",
                     "--max-steps", "2", "--save-steps", "100", "--set", "reward_funcs=[jsonl_accuracy, format_answer]",
                     "--set", "reward_method=all_match", "--set", "task_type=gui", check=True)
    assert "step 2/2" in result.stdout
    broken = tmp_path / "broken.jsonl"  # one <image> for two images: refused at its line, no weights loaded
    broken.write_text(rows.read_text().splitlines()[0].replace("<image><image>", "<image>") + "\n")
    refused = vlmgrpo("train", "--model", tiny["model"], "--data", broken, "--image-root", tiny["image_root"],
                      "--output", tmp_path / "out2", "--dry-run", "--set", "reward_funcs=[jsonl_accuracy]")
    assert refused.returncode == 2 and f"{broken}:1: 1 <image> placeholder(s) for 2 image(s)" in refused.stderr
