"""SFT rows in each format, and every bad SFT input stopped before any weights load: exit 2, one line, no traceback."""

import json
import shutil

import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from conftest import LORA, in_process, merged, sft_args
from vlmgrpo.data.chat import validate_chat_row
from vlmgrpo.commands.cli import main
from vlmgrpo.data.datasets import load_data
from vlmgrpo.errors import DataError

SYSTEM = {"role": "system", "content": "Be brief."}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def load(path, image_root=None):
    return load_data([str(path)], image_root, validate=validate_chat_row)


def problems_of(tmp_path, row, image_root=None):
    path = write_jsonl(tmp_path / "rows.jsonl", [row])
    with pytest.raises(DataError) as info:
        load(path, image_root)
    return info.value.problems


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (32, 16)).save(root / name)
    return root


def test_each_format_becomes_one_list_of_messages(tmp_path):
    rows = [
        {"messages": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text",
                                                                                            "text": "there"}]},
                      {"role": "assistant", "content": "Hello."}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}],
         "system": "Be brief."},
        {"instruction": "Translate.", "input": "bonjour", "output": "hello", "history": [["Hi", "Hello."]]},
        {"instruction": "Say hello.", "input": "", "output": "hello"},
    ]
    samples = load(write_jsonl(tmp_path / "rows.jsonl", rows)).samples
    assert [s.messages for s in samples] == [
        [SYSTEM, {"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello."}],
        [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "Translate.\nbonjour"}, {"role": "assistant", "content": "hello"}],
        [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "hello"}],
    ]
    assert [s.location for s in samples] == [f"{tmp_path / 'rows.jsonl'}:{n}" for n in range(1, 5)]


def test_images_go_at_their_placeholders_or_before_the_first_user_turn(tmp_path, images):
    rows = [
        # VLM-R1's rows: "image" and an <image> placeholder in the human turn.
        {"image": "a.png", "conversations": [{"from": "human", "value": "Where is <image> it?"},
                                             {"from": "gpt", "value": "[1, 2, 3, 4]"}]},
        {"images": ["a.png", "b.png"], "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "or"}, {"type": "image"}]},
            {"role": "assistant", "content": "the first"}]},
        {"images": [str(images / "b.png")], "instruction": "Describe.", "output": "dark"},
    ]
    samples = load(write_jsonl(tmp_path / "rows.jsonl", rows), str(images)).samples
    assert [s.messages[0]["content"] for s in samples] == ["Where is <image> it?", "<image>or<image>",
                                                           "<image>Describe."]
    assert [s.image_paths for s in samples] == [[str(images / "a.png")], [str(images / "a.png"),
                                                                          str(images / "b.png")],
                                                [str(images / "b.png")]]


BAD_ROWS = [
    ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn with text: the row has nothing to learn "
                                                        "from"),
    ({"messages": [{"role": "bot", "content": "hi"}]}, "messages[0]: role 'bot' is not one of system, user, "
                                                       "assistant, tool"),
    ({"messages": [{"role": "user"}]}, "messages[0] must be an object with 'role' and 'content'"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0]: a part must be "
     '{"type": "text", "text": ...} or {"type": "image"} (the image itself in the row\'s "images")'),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "conversations[0]: 'from' 'robot' is not one of human, "
                                                            "user, gpt, assistant, system"),
    ({"conversations": [{"from": "gpt", "value": 3}]}, "conversations[0].value must be a string, got int"),
    ({"instruction": "x", "output": "y", "history": [["only one"]]}, "'history' must be a list of [instruction, "
                                                                     "answer] pairs"),
    ({"instruction": "x"}, "row has none of 'messages' (OpenAI chat), 'conversations' (ShareGPT) or "
                           "'instruction'/'output' (Alpaca)"),
    ({"image": "a.png", "messages": [{"role": "user", "content": "<image><image>"},
                                     {"role": "assistant", "content": "x"}]}, "2 <image> placeholder(s) for 1 image(s)"),
    ({"image": "gone.png", "instruction": "x", "output": "y"}, "image not found: {images}/gone.png"),
    (["a list"], "row is not a JSON object"),
]


@pytest.mark.parametrize("row,message", BAD_ROWS, ids=[m.split(":")[0][:40] for _, m in BAD_ROWS])
def test_each_bad_row_is_reported_with_file_and_line(tmp_path, images, row, message):
    assert problems_of(tmp_path, row, str(images)) == [f"{tmp_path / 'rows.jsonl'}:1: "
                                                       f"{message.replace('{images}', str(images))}"]


def cli(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def one_line_error(result, message):
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, result.output
    assert message in result.output, result.output


NO_MARKERS = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_bad_sft_settings_are_one_line_before_any_weights_load(tiny_text, tmp_path):
    def check(*extra, message):
        one_line_error(cli(*sft_args(tiny_text, tmp_path / "out", *extra, "--dry-run")), message)

    check("--set", "num_generations=4", message="command line: unknown key 'num_generations'; allowed keys are the "
                                                "fields of vlmgrpo's model/data/run configs and of trl.SFTConfig")
    check("--set", "max_length=0", message="key 'max_length': must be >= 1 (tokens)")
    check(*LORA, "--set", "lora_target_modules=[qkv]", message=f"key 'lora_target_modules': qkv match no layer of "
          f"{tiny_text['model']}'s language model; its linear layers are named down_proj, gate_proj, k_proj, lm_head, "
          "o_proj, q_proj, up_proj, v_proj")
    check("--set", "val_split_ratio=0.1", "--eval-data", tiny_text["alpaca"],
          message="key 'eval_data': give evaluation rows either as eval_data or by val_split_ratio, not both")
    check("--adapter", tmp_path / "none", message=f"key 'adapter_name_or_path': {tmp_path / 'none'} does not exist "
                                                  "(no such directory); give the directory of a saved adapter")
    check("--adapter", tiny_text["model"], message=f"{tiny_text['model']} has no adapter_config.json, so it is not a "
                                                   "saved PEFT adapter")
    template = tmp_path / "plain.jinja"
    template.write_text(NO_MARKERS)
    check("--set", f"chat_template_path={template}", message=f"key 'assistant_only_loss': {template} marks no "
                                                              "assistant turns ({% generation %}) and TRL has no "
                                                              "training version of it")
    # Without the loss on assistant turns only, any chat template does.
    result = cli(*sft_args(tiny_text, tmp_path / "out", "--set", f"chat_template_path={template}",
                           "--set", "assistant_only_loss=false", "--dry-run"))
    assert result.exit_code == 0, result.output
    with_image = write_jsonl(tmp_path / "image.jsonl", [{"image": str(template.parent / "a.png"), "instruction": "x",
                                                         "output": "y"}])
    Image.new("RGB", (8, 8)).save(template.parent / "a.png")
    one_line_error(cli("sft", "--model", tiny_text["model"], "--data", with_image, "--output", tmp_path / "out", "--dry-run"),
                   f"{with_image}:1: the row has images but {tiny_text['model']} is a text-only causal LM")


def test_a_model_without_a_chat_template_is_named(tiny_text, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_text["model"], model)
    (model / "chat_template.jinja").unlink()
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    one_line_error(cli("sft", "--model", model, "--data", tiny_text["alpaca"], "--output", tmp_path / "out", "--dry-run"),
                   f"{model}'s chat template: none; chat rows need one: set chat_template_path")


def test_grpo_needs_a_vision_language_model_and_lora_targets_outside_its_vision_tower(tiny_text, tiny, tmp_path):
    common = ["train", "--data", tiny["data"], "--image-root", tiny["image_root"], "--output", tmp_path / "out",
              "--dry-run"]
    one_line_error(cli(*common, "--model", tiny_text["model"]),
                   f"{tiny_text['model']} is a text-only causal LM; `train` (GRPO on grounding data) needs a "
                   "vision-language model")
    # Qwen2.5-VL's vision tower has qkv layers, its language model none.
    one_line_error(cli(*common, "--model", tiny["model"], *LORA, "--set", "lora_target_modules=[qkv]"),
                   "key 'lora_target_modules': qkv match no layer of")


@pytest.fixture
def junk_weights(tiny_text, tmp_path):
    """The tiny model with weights that cannot load: a check that runs after loading would fail differently."""
    model = tmp_path / "junk-model"
    shutil.copytree(tiny_text["model"], model)
    (model / "model.safetensors").write_bytes(b"not weights")
    return model


DONE_WHEN = [
    ("bad row", ["--data", "{bad}"], "error: {bad}:2: messages[0]: role 'bot' is not one of system, user, assistant, "
                                     "tool"),
    ("qlora without a gpu", [*LORA, "--set", "load_in_4bit=true"],
     "error: command line: key 'load_in_4bit': QLoRA needs an NVIDIA GPU (bitsandbytes' 4-bit layers run on CUDA "
     "only) and none is visible here"),
    ("missing model", ["--model", "{tmp}/no-model"], "error: command line: key 'model_name_or_path': {tmp}/no-model "
                                                     "does not exist (no such directory)"),
]


# Each case runs the command in this process (the same command line, the same output, without ~8 s of importing
# torch and trl again per case). That no traceback reaches a real terminal is test_config.py's
# test_bad_key_in_a_real_process_prints_no_traceback: one handler in the CLI turns every user error into one line.
@pytest.mark.parametrize("extra,message", [case[1:] for case in DONE_WHEN], ids=[case[0] for case in DONE_WHEN])
def test_the_command_says_one_line_before_the_weights_load(tiny_text, junk_weights, tmp_path, extra, message):
    if "load_in_4bit=true" in extra and torch.cuda.is_available():
        pytest.skip("a GPU is visible: QLoRA does not fail here")
    bad = write_jsonl(tmp_path / "bad.jsonl", [
        {"instruction": "x", "output": "y"}, {"messages": [{"role": "bot", "content": "x"}]}])
    fill = {"bad": bad, "tmp": tmp_path}
    args = merged(["sft", "--model", junk_weights, "--data", tiny_text["alpaca"], "--output", tmp_path / "out"],
                  [str(value).format(**fill) for value in extra])
    result = in_process(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(**fill)), result.stderr
    assert not (tmp_path / "out").exists()
