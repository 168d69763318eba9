import functools
import json

import pytest
from click.testing import CliRunner
from PIL import Image

from vlmgrpo.commands.cli import main
from vlmgrpo.data.datasets import apply_sampling, load_data as load_rows_with
from vlmgrpo.commands.grpo import GRPO
from vlmgrpo.data.rec import prompt_messages, to_hf_dataset, validate_row
from vlmgrpo.errors import DataError


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    Image.new("RGB", (200, 100), "white").save(root / "a.png")
    Image.new("RGB", (50, 50), "white").save(root / "b.png")
    (root / "broken.png").write_bytes(b"not a png at all")
    return root


def load_data(*args, validate=validate_row, **kwargs):
    """REC rows, validated as `train` validates them."""
    return load_rows_with(*args, validate=validate, **kwargs)


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
    ({"conversations": conv_row()["conversations"]}, "1 <image> placeholder(s) for 0 image(s)"),
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


@pytest.mark.parametrize("content, says", [
    (b"datasets:\n  - path: a.jsonl # caf\xe9\n", ":2: not UTF-8: byte 0xe9 at column 24; save the file as UTF-8"),
    (b"datasets: &d [a.jsonl, *d]\n", ":1: the alias *d stands inside its own anchor"),
    (b"datasets:\n  - path: a.jsonl\n  - path: b.jsonl\n    path: c.jsonl\n", ":4: key 'path': written twice"),
])
def test_a_mixture_file_is_read_by_the_config_s_bounded_reader(tmp_path, images, content, says):
    mixture = tmp_path / "mix.yaml"
    mixture.write_bytes(content)
    assert errors_of([str(mixture)], images)[0].startswith(f"{mixture}{says}")


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
    model = tmp_path / "model"  # checked for config.json and readability, never loaded: the weights are junk
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2_5_vl"}')  # read for the model's kind
    (model / "model.safetensors").write_bytes(b"not weights")
    result = CliRunner().invoke(main, ["train", "--model", str(model), "--data", str(data),
                                       "--image-root", str(images), "--output", str(tmp_path / "out"), "--dry-run"])
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


def test_vlm_r1_colon_joined_files_and_image_folders(tmp_path, images):
    other = tmp_path / "other"
    other.mkdir()
    Image.new("RGB", (64, 32)).save(other / "x.png")
    first = write_jsonl(tmp_path / "a.jsonl", [conv_row()])
    second = write_jsonl(tmp_path / "b.jsonl", [conv_row(image="x.png"), conv_row(image="x.png")])
    loaded = load_data([f"{first}:{second}"], f"{images}:{other}", "absolute")
    assert [s.image_sizes[0] for s in loaded.samples] == [(200, 100), (64, 32), (64, 32)]
    problems = errors_of([f"{first}:{second}"], f"{images}:{other}:{images}")
    assert problems == ["image_root lists 3 ':'-joined values for 2 data file(s); give one per data file, in the "
                        "same order (as VLM-R1's --image_folders)"]


def test_sampling_all_and_percentages_round_up_as_vlm_r1():
    rows = list(range(10))
    assert apply_sampling(rows, "all", 0) == rows
    assert apply_sampling(rows, "first:15%", 0) == [0, 1]  # ceil(1.5)
    assert apply_sampling(rows, "end:1%", 0) == [9]


def test_text_only_rows_and_answers_without_a_box(tmp_path, images):
    text_row = {"id": "t", "conversations": [{"from": "human", "value": "What is 2 + 2?"},
                                              {"from": "gpt", "value": "<answer>4</answer>"}]}
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(), text_row])
    problems = errors_of([str(data)], images)  # the iou rewards need a box in every answer
    assert problems == [f"{data}:2: cannot parse a box [x1, y1, x2, y2] from the answer '<answer>4</answer>' (the "
                        "iou reward needs one)"]
    loaded = load_data([str(data)], str(images), "absolute",
                       validate=functools.partial(validate_row, require_box=False))
    text = loaded.samples[1]
    assert (text.row_id, text.image_paths, text.solution, text.answer) == ("t", [], None, "<answer>4</answer>")
    assert loaded.samples[0].row_id == f"{data}:1"  # no "id": the location stands in
    row = to_hf_dataset(loaded.samples, "{question}")[1]
    assert row["images"] == [] and row["image_size"] is None
    assert [block["type"] for block in row["prompt"][0]["content"]] == ["text"]


def test_validation_split_is_seeded_and_rounds_up(tmp_path, images):
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row() for _ in range(10)])

    def split(ratio, seed=42):
        loaded = load_data([str(data)], str(images), "absolute")
        loaded.split_validation(ratio, seed)
        return loaded

    held_out = split(0.25)
    assert len(held_out.samples) == 7 and len(held_out.validation) == 3  # ceil(2.5)
    assert [s.location for s in held_out.validation] == [s.location for s in split(0.25).validation]
    assert "split: 7 training rows, 3 validation rows" in held_out.summary()
    assert {s.location for s in held_out.samples + held_out.validation} == {f"{data}:{n}" for n in range(1, 11)}
    with pytest.raises(DataError, match="holds out 10 of 10 rows, leaving none to train on"):
        split(0.95)


def test_joined_paths_in_a_config_file_are_relative_to_it(tmp_path, images):
    from vlmgrpo.config.load import load_config

    write_jsonl(tmp_path / "a.jsonl", [conv_row()])
    write_jsonl(tmp_path / "b.jsonl", [conv_row(), conv_row()])
    recipe = tmp_path / "recipes" / "rec.yaml"
    recipe.parent.mkdir()
    recipe.write_text(f"data_file_paths: ../a.jsonl:../b.jsonl\nimage_folders: ../images:{images}\n")
    config = load_config(str(recipe), {}, GRPO)
    loaded = load_data(config.data.data, config.data.image_root, config.data.box_space)
    assert [r.rows_used for r in loaded.reports] == [1, 2]


def dry_run(tmp_path, data, images):
    model = tmp_path / "model"  # checked for config.json and readability, never loaded
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    (model / "model.safetensors").write_bytes(b"not weights")
    return CliRunner().invoke(main, ["train", "--model", str(model), "--data", str(data), "--image-root",
                                     str(images), "--output", str(tmp_path / "out"), "--dry-run"])


def test_dry_run_decodes_every_image_whole_and_names_the_row_of_a_truncated_one(tmp_path, images):
    whole = (images / "a.png").read_bytes()
    Image.effect_noise((400, 400), 64).convert("RGB").save(images / "noise.png")
    (images / "cut.png").write_bytes((images / "noise.png").read_bytes()[:4000])  # a copy cut short: header intact
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(), conv_row(image="cut.png")])
    load_data([str(data)], str(images), "absolute")  # the header reads: every run's checks pass it
    result = dry_run(tmp_path, data, images)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{data}:2: image cannot be decoded: {images / 'cut.png'} (OSError" in result.output
    assert (images / "a.png").read_bytes() == whole
    # Without --dry-run the run starts; the row that draws the image is one line naming it, at the step that draws it
    # (the dataset TRL reads, as it reads it), for REC rows and for chat rows alike.
    loaded = load_data([str(data)], str(images), "absolute")
    dataset = to_hf_dataset(loaded.samples, "{Question}")
    assert len(dataset[0]["images"]) == 1
    with pytest.raises(DataError) as caught:
        dataset[1]
    assert str(caught.value).startswith(f"{data}:2: image cannot be decoded: {images / 'cut.png'} (OSError")
    from vlmgrpo.data.chat import _materialize as chat_rows
    with pytest.raises(DataError, match="image cannot be decoded: .*cut.png"):
        chat_rows({"messages": [json.dumps([{"role": "user", "content": "<image>hi"}])],
                   "images": [[str(images / "cut.png")]]})


def test_a_decompression_bomb_is_a_row_error_not_a_traceback(tmp_path, images, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # a 200 x 100 image is over twice that: PIL refuses it
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row()])
    problems = errors_of([str(data)], images)
    assert problems[0].startswith(f"{data}:1: image too large to decode: {images / 'a.png'}")


def test_a_byte_that_is_not_utf8_is_an_error_at_its_row_in_jsonl_and_json_lists(tmp_path, images):
    rows = tmp_path / "d.jsonl"
    rows.write_bytes(json.dumps(conv_row()).encode() + b"\n" + json.dumps(conv_row(question="<image>caf\xe9?"),
                                                                          ensure_ascii=False).encode("latin-1") + b"\n")
    listed = tmp_path / "d.json"
    listed.write_bytes(b"[\n" + json.dumps(conv_row()).encode() + b",\n" + json.dumps(conv_row(
        question="<image>caf\xe9?"), ensure_ascii=False).encode("latin-1") + b"\n]\n")
    for path in (rows, listed):
        (problem,) = errors_of([str(path)], images)
        line = 2 if path == rows else 3
        assert problem.startswith(f"{path}:{line}: not UTF-8: byte 0xe9 at column ")


def test_each_row_s_accuracy_method_is_its_own_else_its_file_s_as_vlm_r1_resolves_it(tmp_path, images):
    """accu_reward_method in a row wins; else the file's place in the ':'-joined reward_method (VLM-R1's
    --reward_method); a mixture's mapping names its own. The method reaches the rewards as a dataset column."""
    answer = "<answer>B</answer>"
    first = write_jsonl(tmp_path / "a.jsonl", [conv_row(answer=answer), {**conv_row(answer=answer),
                                                                         "accu_reward_method": "yes_no"}])
    second = write_jsonl(tmp_path / "b.jsonl", [conv_row(answer=answer)])
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"datasets:\n  - {{path: {second}, reward_method: weighted_sum}}\n  - {{path: {first}}}\n")
    checked = functools.partial(validate_row, require_box=False, check_method=True)
    loaded = load_data([f"{first}:{second}"], str(images), "absolute", validate=checked, reward_method="mcq:all_match")
    assert [s.reward_method for s in loaded.samples] == ["mcq", "yes_no", "all_match"]
    assert to_hf_dataset(loaded.samples, "{question}")[1]["accu_reward_method"] == "yes_no"
    loaded = load_data([str(mixture)], str(images), "absolute", validate=checked, reward_method="mcq")
    assert [s.reward_method for s in loaded.samples] == ["weighted_sum", "mcq", "yes_no"]
    with pytest.raises(DataError) as info:
        load_data([f"{first}:{second}"], str(images), "absolute", validate=checked, reward_method="mcq:mcq:mcq")
    assert info.value.problems == ["reward_method lists 3 ':'-joined values for 2 data file(s); give one per data "
                                   "file, in the same order (as VLM-R1's --reward_method)"]


def test_a_misspelt_method_is_named_at_its_row_before_training(tmp_path, images):
    """A file without a method takes VLM-R1's "default"; a misspelt method is named at its line when jsonl_accuracy
    is among the rewards, and not otherwise."""
    data = write_jsonl(tmp_path / "d.jsonl", [conv_row(answer="<answer>B</answer>"),
                                              {**conv_row(answer="<answer>B</answer>"), "accu_reward_method": "mcp"}])
    checked = functools.partial(validate_row, require_box=False, check_method=True)
    with pytest.raises(DataError) as info:
        load_data([str(data)], str(images), "absolute", validate=checked, reward_method="default:x")
    assert info.value.problems == ["reward_method lists 2 ':'-joined values for 1 data file(s); give one per data "
                                   "file, in the same order (as VLM-R1's --reward_method)"]
    with pytest.raises(DataError) as info:
        load_data([str(data)], str(images), "absolute", validate=checked, reward_method="mcq")
    methods = "default, mcq, yes_no, math, map, weighted_sum, od_ap, od_ap50, odLength, all_match, llm"
    assert info.value.problems == [f"{data}:2: accu_reward_method 'mcp' is not one of VLM-R1's; use one of: {methods}"]
    unchecked = load_data([str(data)], str(images), "absolute", validate=functools.partial(validate_row,
                                                                                           require_box=False))
    assert [s.reward_method for s in unchecked.samples] == ["default", "mcp"]
    first = write_jsonl(tmp_path / "first.jsonl", [conv_row(answer="<answer>B</answer>")])
    assert load_data([str(first)], str(images), "absolute", validate=checked).samples[0].reward_method == "default"
