import json

import pytest
from click.testing import CliRunner
from PIL import Image

from vlmgrpo.cli import main
from vlmgrpo.data import apply_sampling, load_data, prompt_messages, to_hf_dataset
from vlmgrpo.errors import DataError


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    Image.new("RGB", (200, 100), "white").save(root / "a.png")
    Image.new("RGB", (50, 50), "white").save(root / "b.png")
    (root / "broken.png").write_bytes(b"not a png at all")
    return root


def conv_row(image="a.png", question="<image>Where is the cat?", answer='{"bbox_2d": [10, 10, 40, 40]}'):
    return {"image": image, "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]}


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def errors_of(entries, root, box_space="absolute"):
    with pytest.raises(DataError) as info:
        load_data(entries, str(root), box_space)
    return info.value.problems


def test_valid_jsonl_rows(tmp_path, images):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(), conv_row(image=["a.png", "b.png"],
                                                                   question="<image> vs <image>: which?")])
    loaded = load_data([str(data)], str(images), "absolute")
    assert [s.location for s in loaded.samples] == [f"{data}:1", f"{data}:2"]
    assert loaded.samples[0].solution == (10, 10, 40, 40)
    assert loaded.samples[1].image_sizes == [(200, 100), (50, 50)]
    assert "2 rows read, 2 used, 3 images, 0 errors" in loaded.summary()


@pytest.mark.parametrize("row,message", [
    (conv_row(image="missing.png"), "image not found"),
    (conv_row(image="broken.png"), "image unreadable"),
    (conv_row(question="Where is the cat?"), "0 <image> placeholder(s) for 1 image(s)"),
    (conv_row(image=["a.png", "b.png"]), "1 <image> placeholder(s) for 2 image(s)"),
    (conv_row(answer="somewhere on the left"), "cannot parse a box"),
    (conv_row(answer="[40, 10, 10, 40]"), "x2 <= x1"),
    ({"conversations": conv_row()["conversations"]}, "row has no 'image'"),
    ({"image": "a.png", "text": "hi"}, "neither 'conversations' nor 'problem'/'solution'"),
    ("{not json", "invalid JSON"),
])
def test_each_bad_row_is_reported_with_file_and_line(tmp_path, images, row, message):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(), row])
    problems = errors_of([str(data)], images)
    assert len(problems) == 1
    assert problems[0].startswith(f"{data}:2: ") and message in problems[0]


def test_all_errors_listed_across_files(tmp_path, images):
    first = write_jsonl(tmp_path / "one.jsonl", [conv_row(image="missing.png"), conv_row(), conv_row(answer="?")])
    second = tmp_path / "two.json"
    second.write_text('[\n  {"image": "a.png", "problem": "cat?", "solution": [1, 2, 3, 4]},\n'
                      '  {"image": "nope.png",\n   "problem": "dog?", "solution": "no box"}\n]\n')
    problems = errors_of([str(first), str(second)], images)
    locations = sorted(p.split(": ")[0] for p in problems)
    assert locations == sorted([f"{first}:1", f"{first}:3", f"{second}:3", f"{second}:3"])


def test_json_list_form_and_norm1000_boxes(tmp_path, images):
    data = tmp_path / "old.json"
    data.write_text(json.dumps([{"image": "a.png", "problem": "the cat", "solution": [100, 100, 500, 1000]}]))
    sample = load_data([str(data)], str(images), "norm1000").samples[0]
    assert sample.solution == pytest.approx((20, 10, 100, 100))  # 200x100 image


def test_mixture_with_sampling_and_own_image_roots(tmp_path, images):
    rows = [conv_row() for _ in range(10)]
    write_jsonl(tmp_path / "a.jsonl", rows)
    other = tmp_path / "other"
    other.mkdir()
    Image.new("RGB", (64, 64)).save(other / "x.png")
    write_jsonl(tmp_path / "b.jsonl", [conv_row(image="x.png") for _ in range(4)])
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(
        "datasets:\n"
        f"  - path: a.jsonl\n    image_root: {images}\n    sampling: random:30%\n"
        "  - json_path: b.jsonl\n    image_folder: other\n    sampling: first:2\n"
    )
    loaded = load_data([str(mixture)], None, "absolute")
    assert [r.rows_used for r in loaded.reports] == [3, 2]
    assert all(s.image_paths[0].startswith(str(other)) for s in loaded.samples[3:])


def test_sampling_strategies():
    rows = list(range(10))
    assert apply_sampling(rows, "first:3", 0) == [0, 1, 2]
    assert apply_sampling(rows, "end:2", 0) == [8, 9]
    assert len(set(apply_sampling(rows, "random:50%", 0))) == 5
    assert apply_sampling(rows, "random:4", 1) == apply_sampling(rows, "random:4", 1)


def test_bad_sampling_and_missing_file(tmp_path, images):
    mixture = tmp_path / "mix.yaml"
    mixture.write_text("datasets:\n  - path: nope.jsonl\n    sampling: some\n")
    problems = errors_of([str(mixture)], images)
    assert any("does not exist" in p for p in problems) and any("sampling 'some'" in p for p in problems)


def test_prompt_places_images_at_placeholders():
    messages = prompt_messages("<image>left, <image>right", "{question} Answer.")
    assert [block["type"] for block in messages[0]["content"]] == ["image", "text", "image", "text"]


def test_dataset_loads_images_lazily(tmp_path, images):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row()])
    dataset = to_hf_dataset(load_data([str(data)], str(images), "absolute").samples, "{question}")
    assert "images" not in dataset.column_names  # only paths are stored
    row = dataset[0]
    assert row["images"][0].size == (200, 100) and row["solution"] == [10, 10, 40, 40]


def test_dry_run_prints_summary_without_a_model(tmp_path, images):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(), conv_row()])
    result = CliRunner().invoke(main, ["train", "--model", "/nonexistent/model", "--data", str(data),
                                       "--image-root", str(images), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "2 rows read, 2 used, 2 images, 0 errors" in result.output


def test_dry_run_lists_every_error_and_exits_2(tmp_path, images):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(image="x.png"), conv_row(answer="?"), conv_row()])
    result = CliRunner().invoke(main, ["train", "--model", "m", "--data", str(data), "--image-root", str(images),
                                       "--dry-run"])
    assert result.exit_code == 2
    assert f"{data}:1: image not found" in result.output and f"{data}:2: cannot parse a box" in result.output


def test_dataset_transform_pickles_for_loader_workers(tmp_path, images):
    import pickle

    data = write_jsonl(tmp_path / "d.jsonl", [conv_row()])
    dataset = to_hf_dataset(load_data([str(data)], str(images), "absolute").samples, "{question}")
    assert pickle.loads(pickle.dumps(dataset))[0]["images"][0].size == (200, 100)
