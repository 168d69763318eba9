"""`vlmgrpo score`: the configured rewards on given completions, with the model's processor and no weights."""

import json

import pytest
from click.testing import CliRunner
from PIL import Image

from conftest import read_jsonl, vlmgrpo
from vlm_r1_table import IMAGES, TABLE
from vlmgrpo.commands.cli import main


@pytest.fixture
def table_data(tmp_path):
    """The table's two images and one row for each, the rows' ids being the image names."""
    rows = []
    for name, (size, label) in IMAGES.items():
        Image.new("RGB", size, "white").save(tmp_path / f"{name}.png")
        rows.append({"id": name, "image": f"{name}.png", "problem": "the red box", "solution": label})
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


@pytest.mark.slow
def test_score_gives_vlm_r1_rewards_on_the_table(tiny, table_data, tmp_path):
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": row, "completion": text}) + "\n" for row, text, *_ in TABLE))
    result = vlmgrpo("score", "--model", tiny["model"], "--data", table_data, "--image-root", tmp_path,
                     "--completions", completions, check=True)
    scored = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(scored) == len(TABLE) >= 20
    for line, (row, text, expected_iou, expected_format, why) in zip(scored, TABLE):
        assert line["id"] == row and set(line["rewards"]) == {"iou", "format"}
        assert line["rewards"]["iou"] == pytest.approx(expected_iou, abs=0.01), why
        assert line["rewards"]["format"] == expected_format, why


def test_score_with_lenient_and_custom_rewards_from_a_config(tiny, table_data, tmp_path):
    config = tmp_path / "score.yaml"
    config.write_text(f"model_name_or_path: {tiny['model']}\ndata: [{table_data}]\nimage_root: {tmp_path}\n"
                      "reward_funcs: [iou_lenient, format_lenient, shaping.py:token_sum]\n")
    (tmp_path / "shaping.py").write_text("def token_sum(prompts, completions, completion_ids, solution, **kwargs):\n"
                                         "    return [float(len(ids)) for ids in completion_ids]\n")
    completions = tmp_path / "c.jsonl"
    completions.write_text(json.dumps({"id": "wide", "completion": "<think>x</think>[28, 11, 84, 45]"}) + "\n")
    result = CliRunner().invoke(main, ["score", "--config", str(config), "--set",
                                       f"reward_funcs=[iou_lenient, format_lenient, {tmp_path}/shaping.py:token_sum]",
                                       "--completions", str(completions)])
    assert result.exit_code == 0, result.output
    (line,) = [json.loads(text) for text in result.stdout.splitlines()]
    assert line["rewards"]["iou_lenient"] == pytest.approx(0.9882, abs=1e-3)  # a bare box counts when lenient
    assert line["rewards"]["format_lenient"] == 0.0 and line["rewards"]["token_sum"] > 0


def test_bad_completions_are_listed_at_once(tiny, table_data, tmp_path):
    completions = tmp_path / "c.jsonl"
    completions.write_text('{"id": "wide", "completion": "ok"}\n{"id": "nope", "completion": "x"}\n'
                           '{"completion": "no id"}\nnot json\n')
    result = CliRunner().invoke(main, ["score", "--model", tiny["model"], "--data", str(table_data),
                                       "--image-root", str(tmp_path), "--completions", str(completions)])
    assert result.exit_code == 2
    assert f"{completions}:2: id 'nope' is not the id of any data row" in result.output
    assert f'{completions}:3: expected {{"id": <a data row\'s id>, "completion": "<text>"}}' in result.output
    assert f"{completions}:4: invalid JSON" in result.output
    assert "3 data errors:" in result.output


def test_the_right_answer_for_each_tiny_row_scores_one(tiny, tmp_path):
    """The tiny images' sides are multiples of 28 within max_pixels, so the processor keeps their size and the
    label's own pixels are the right answer."""
    rows = read_jsonl(tiny["data"])
    completions = tmp_path / "c.jsonl"
    completions.write_text("".join(
        json.dumps({"id": row["id"], "completion": f"<think>there</think><answer>{row['conversations'][1]['value']}"
                                                   "</answer>"}) + "\n" for row in rows))
    result = CliRunner().invoke(main, ["score", "--model", tiny["model"], "--data", tiny["data"],
                                       "--image-root", tiny["image_root"], "--completions", str(completions)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"id": row["id"], "rewards": {"iou": 1.0, "format": 1.0}} for row in rows]
