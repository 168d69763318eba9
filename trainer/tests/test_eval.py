"""`vlmgrpo eval`: REC accuracy as VLM-R1 computes it, from given completions (a hand-labelled fixture) and from
generation with a base model, an adapter and a merged model."""

import json

import pytest
from PIL import Image

from conftest import in_process, read_jsonl, vlmgrpo
from vlmgrpo.data.rec import Sample
from vlmgrpo.evaluation.rec import judge, summarise

TRUTH = [0, 0, 100, 100]  # every row's box, in the pixels of its 100x100 image: IoU = answered area / 10000
# (row id, completion, IoU, correct): labelled by hand; answers are read in absolute pixels.
LABELLED = {
    "first.jsonl": [
        ("a1", "<think>x</think> <answer>[0, 0, 100, 51]</answer>", 0.51, True),  # just above 0.5
        ("a2", "<think>x</think> <answer>[0, 0, 100, 49]</answer>", 0.49, False),  # just below
        ("a3", '<answer>{"bbox_2d": [0, 0, 100, 50]}</answer>', 0.5, True),  # exactly 0.5 counts (>=)
        ("a4", "<answer>[0, 0, 100, 60] or [0, 0, 10, 10]</answer>", 0.6, True),  # several boxes: the first
    ],
    "second.jsonl": [
        ("b1", "<answer>[0, 0, 10, 10] or [0, 0, 100, 100]</answer>", 0.01, False),  # several: the first again
        ("b2", "<answer>the whole picture</answer>", 0.0, False),  # no box
        ("b3", "<answer>[0, 0, 100]</answer>", 0.0, False),  # malformed: three numbers
        ("b4", "<answer>[0.5, 0, 100, 100]</answer>", 0.0, False),  # malformed for VLM-R1: not integers
        ("b5", "[0, 0, 100, 100]", 0.0, False),  # no <answer> block: VLM-R1 reads nothing
    ],
}
NO_BOX = {"b2", "b3", "b4", "b5"}


@pytest.fixture
def labelled(tmp_path):
    Image.new("RGB", (100, 100), "white").save(tmp_path / "white.png")
    files = []
    for name, rows in LABELLED.items():
        path = tmp_path / name
        path.write_text("".join(json.dumps({"id": row, "image": "white.png", "problem": "the white square",
                                            "solution": TRUTH}) + "\n" for row, *_ in rows))
        files.append(path)
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": row, "completion": text}) + "\n"
                                   for rows in LABELLED.values() for row, text, *_ in rows))
    return files, completions


def test_judging_reads_the_first_box_of_the_answer_like_the_iou_reward():
    for rows in LABELLED.values():
        for row, text, expected_iou, correct in rows:
            sample = Sample(f"f.jsonl:{row}", row, ["x.png"], "q", "a", tuple(TRUTH), [(100, 100)])
            prediction = judge(sample, text, "absolute", None)
            assert prediction.iou == pytest.approx(expected_iou, abs=1e-3), row
            assert prediction.correct is correct, row
            assert (prediction.box is None) == (row in NO_BOX), row


def test_summary_counts_per_file_in_the_order_given():
    samples = [Sample(f"{name}:{i}", i, [], "q", "a", tuple(TRUTH), [(100, 100)])
               for name in ("z.json", "a.json") for i in range(2)]
    predictions = [judge(s, text, "absolute", None) for s, text in zip(samples, [
        "<answer>[0, 0, 100, 100]</answer>", "none", "none", "<answer>[0, 0, 100, 80]</answer>"])]
    summary = summarise(samples, predictions, {"model": "m"})
    assert list(summary["per_file"]) == ["z.json", "a.json"]
    assert summary["accuracy"] == 0.5 and summary["per_file"]["z.json"]["correct"] == 1
    assert summary["no_box"] == 2 and summary["settings"] == {"model": "m"}


def test_eval_of_given_completions_gives_the_hand_labelled_accuracy(tiny, labelled, tmp_path):
    files, completions = labelled
    output = tmp_path / "out"
    data = [arg for path in files for arg in ("--data", path)]
    result = in_process("eval", "--model", tiny["model"], *data, "--image-root", tmp_path, "--output", output,
                        "--completions", completions, "--set", "answer_box_space=absolute", check=True)
    summary = json.loads((output / "eval.json").read_text())
    assert summary["accuracy"] == 3 / 9 and (summary["correct"], summary["total"], summary["no_box"]) == (3, 9, 4)
    assert summary["per_file"][str(files[0])]["accuracy"] == 0.75
    assert summary["per_file"][str(files[1])]["accuracy"] == 0.0
    assert json.loads(result.stdout)["accuracy"] == 3 / 9
    predictions = read_jsonl(output / "predictions.jsonl")
    assert [p["id"] for p in predictions] == [row for rows in LABELLED.values() for row, *_ in rows]
    assert {"id", "completion", "box", "iou", "correct"} <= set(predictions[0])
    assert predictions[0]["box"] == [0, 0, 100, 51] and predictions[0]["correct"] is True
    assert sorted(p.name for p in output.iterdir()) == ["eval.json", "predictions.jsonl"]  # no temporary left


def test_max_samples_takes_the_first_rows_of_each_file(tiny, labelled, tmp_path):
    files, completions = labelled
    output = tmp_path / "out"
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(line + "\n" for line in completions.read_text().splitlines()
                               if json.loads(line)["id"] in ("a1", "a2", "b1", "b2")))
    in_process("eval", "--model", tiny["model"], "--data", files[0], "--data", files[1], "--image-root", tmp_path,
               "--output", output, "--completions", partial, "--max-samples", "2", "--set",
               "answer_box_space=absolute", check=True)
    summary = json.loads((output / "eval.json").read_text())
    assert summary["total"] == 4 and summary["correct"] == 1


def test_bad_input_is_one_error_before_any_weight_loads(tiny, labelled, tmp_path):
    files, _ = labelled
    stray = tmp_path / "stray.jsonl"
    stray.write_text('{"id": "nosuch", "completion": "<answer>[1, 2, 3, 4]</answer>"}\n')
    result = in_process("eval", "--model", tiny["model"], "--data", files[0], "--image-root", tmp_path,
                        "--output", tmp_path / "out", "--completions", stray)
    assert result.returncode == 2 and "stray.jsonl:1: id 'nosuch' is not the id of any data row" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    result = in_process("eval", "--model", tiny["model"], "--data", files[0], "--output", tmp_path / "out",
                        "--max-samples", "0")
    assert result.returncode == 2 and "--max-samples 0" in result.stderr


def _boxes(*boxes) -> str:
    return "```json\n" + json.dumps([{"bbox_2d": box, "label": "square"} for box in boxes]) + "\n```"


def test_eval_of_task_rows_gives_each_file_s_mean_score_by_its_method(tiny, tmp_path):
    """jsonl_accuracy among the rewards: a detection file scored by od_ap (COCO AP over IoU 0.50:0.95, computed here
    from each answer's IoU with the one labelled box) and a multiple-choice file by mcq, per file and overall."""
    Image.new("RGB", (100, 100), "white").save(tmp_path / "white.png")
    def row(index, answer, method):
        return json.dumps({"id": index, "image": "white.png", "accu_reward_method": method, "conversations": [
            {"from": "human", "value": "<image>Find the square."}, {"from": "gpt", "value": answer}]}) + "\n"
    detection, choice = tmp_path / "ovd.jsonl", tmp_path / "mcq.jsonl"
    detection.write_text("".join(row(f"d{i}", _boxes(TRUTH), "od_ap") for i in range(3)))
    choice.write_text("".join(row(f"c{i}", "B", "mcq") for i in range(2)))
    # IoU with TRUTH: 1.0, 0.62 (matched at the thresholds 0.50, 0.55, 0.60 of ten), and no box at all
    answers = {"d0": f"<answer>{_boxes(TRUTH)}</answer>", "d1": f"<answer>{_boxes([0, 0, 100, 62])}</answer>",
               "d2": "<answer>nothing here</answer>", "c0": "<answer>B</answer>", "c1": "<answer>C</answer>"}
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": key, "completion": text}) + "\n" for key, text in answers.items()))
    thresholds = [0.5 + 0.05 * i for i in range(10)]
    expected_ap = [1.0, sum(t <= 0.62 for t in thresholds) / 10, 0.0]
    assert expected_ap[1] == 0.3
    output = tmp_path / "out"
    result = in_process("eval", "--model", tiny["model"], "--data", detection, "--data", choice, "--image-root",
                        tmp_path, "--output", output, "--completions", completions,
                        "--set", "reward_funcs=[jsonl_accuracy]", check=True)
    summary = json.loads((output / "eval.json").read_text())
    assert summary["per_file"][str(detection)]["accuracy"] == pytest.approx(sum(expected_ap) / 3)
    assert summary["per_file"][str(detection)]["methods"] == ["od_ap"]
    assert summary["per_file"][str(choice)]["accuracy"] == 0.5
    assert summary["accuracy"] == pytest.approx((sum(expected_ap) + 1.0) / 5) and summary["correct"] == 2
    predictions = read_jsonl(output / "predictions.jsonl")
    assert [(p["id"], p["method"]) for p in predictions][:2] == [("d0", "od_ap"), ("d1", "od_ap")]
    assert predictions[1]["score"] == pytest.approx(0.3) and json.loads(result.stdout)["total"] == 5


@pytest.mark.slow
def test_eval_generates_with_a_base_model_batched_as_one_by_one(tiny, tmp_path):
    common = ["eval", "--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
              "--max-samples", "4", "--max-new-tokens", "6"]
    vlmgrpo(*common, "--output", tmp_path / "batched", "--batch-size", "4", check=True)
    in_process(*common, "--output", tmp_path / "single", "--batch-size", "1", check=True)
    batched, single = (read_jsonl(tmp_path / name / "predictions.jsonl") for name in ("batched", "single"))
    assert len(batched) == 4 and [p["completion"] for p in batched] == [p["completion"] for p in single]
    summary = json.loads((tmp_path / "batched" / "eval.json").read_text())
    assert summary["settings"]["do_sample"] is False and summary["settings"]["batch_size"] == 4
