"""Every field as a flag, as TRL's scripts take them (commands/flags.py), and VLM-R1's grpo_jsonl.py arguments."""

import dataclasses
import typing

import pytest

from conftest import in_process

from vlmgrpo.commands.flags import kind, parse_flags
from vlmgrpo.commands.training import RECIPES

GRPO = RECIPES["train"]
# Sample values by kind for fields whose default is None: what a user would pass.
SAMPLES = {"bool": (["true"], True), "str": (["x"], "x"), "list_str": (["a", "b"], ["a", "b"])}
# Fields the trainer owns or checks against choices: a value it accepts.
CHOSEN = {"report_to": (["none"], "none"), "resume_from_checkpoint": None, "bf16": (["false"], False),
          "lr_scheduler_type": (["cosine"], "cosine")}


def sample(name: str, how: str, default):
    """(the flag's words, the value the config must hold) for one field."""
    if name in CHOSEN:
        return CHOSEN[name]
    if isinstance(default, bool):
        return ([str(not default).lower()], not default)
    if isinstance(default, (int, float)) and not isinstance(default, bool):  # its own default: within its range
        return ([str(default)], default)
    if isinstance(default, str) and default:
        return ([default], default)
    if isinstance(default, list) and default and all(isinstance(item, str) for item in default):
        return (list(default), list(default))
    return SAMPLES.get(how)


def grpo_fields():
    import trl

    hints = typing.get_type_hints(trl.GRPOConfig)
    for field in dataclasses.fields(trl.GRPOConfig):
        if field.init:
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            yield field.name, kind(hints[field.name]), getattr(default, "value", default)


def test_every_grpo_config_field_is_a_flag_and_reaches_the_trl_config():
    """Each field of GRPOConfig, in both spellings, lands in the keyword arguments GRPOConfig is built from (one
    config of every field at once: a config per field takes half a minute)."""
    from vlmgrpo.config.load import build_config

    words, expected = [], {}
    for name, how, default in grpo_fields():
        picked = sample(name, how, default)
        if name == "resume_from_checkpoint":  # read as vlmgrpo's resume: test_flags_read_as_hf_argument_parser_...
            continue
        if picked is None:  # a mapping or an object (accelerator_config ...): a flag still, its value any YAML
            assert list(parse_flags([f"--{name}", "null"], GRPO)[0]) == [name], name
            continue
        dashed = parse_flags([f"--{name.replace('_', '-')}", *picked[0]], GRPO)[0]
        assert dashed == parse_flags([f"--{name}", *picked[0]], GRPO)[0], name
        words += [f"--{name}", *picked[0]]
        expected[name] = picked[1]
    config = build_config({}, "<defaults>", parse_flags(words, GRPO)[0], GRPO)
    values = config.flat()
    assert {name: values[name] for name in expected} == expected
    assert {config.origins[name] for name in expected} == {"command line"}
    assert len(expected) > 150


def test_epsilon_high_reaches_grpo_config():
    from vlmgrpo.config.load import build_config
    from vlmgrpo.training.started import build_trl_config

    overrides, _ = parse_flags(["--epsilon_high", "0.28", "--output_dir", "/tmp/vr1-flags"], GRPO)
    assert build_trl_config(build_config({}, "<defaults>", overrides, GRPO), None).epsilon_high == 0.28


@pytest.mark.parametrize("words, expected", [
    (["--bf16"], {"bf16": True}), (["--bf16", "true"], {"bf16": True}), (["--use_vllm", "False"], {"use_vllm": False}),
    (["--no_gradient_checkpointing"], {"gradient_checkpointing": False}), (["--lora-r", "64"], {"lora_r": 64}),
    (["--reward_funcs", "accuracy", "format"], {"reward_funcs": ["accuracy", "format"]}),
    (["--reward_funcs", "accuracy"], {"reward_funcs": ["accuracy"]}),
    (["--learning_rate=1e-5"], {"learning_rate": 1e-5}),
    (["--nproc_per_node=8", "src/open_r1/grpo_jsonl.py", "--nnodes", "1"], {"nproc_per_node": 8, "nnodes": 1}),
    (["--resume_from_checkpoint", "True"], {"resume": "auto"}), (["--resume_from_checkpoint", "False"], {}),
    (["--run_name", "123"], {"run_name": "123"}),
    (["--freeze_vision_modules", "true"], {"freeze_vision_modules": True}),
    (["--data_file_paths", "a.jsonl:b.jsonl"], {"data_file_paths": ["a.jsonl:b.jsonl"]}),
    (["--dataset-name", "this_is_not_used", "--max_anyres_num", "6"], {}),
])
def test_flags_read_as_hf_argument_parser_reads_them(words, expected):
    assert parse_flags(words, GRPO)[0] == expected


@pytest.mark.parametrize("words, message", [
    (["--epsilon_hihg", "0.2"], "no such option or config key '--epsilon_hihg'; did you mean --epsilon_high"),
    (["--bf16", "maybe"], "--bf16 takes true or false"),
    (["--learning_rate"], "--learning_rate needs a value"),
    (["stray"], "unexpected argument 'stray'"),
])
def test_a_bad_flag_is_one_line_exit_2(words, message):
    result = in_process("train", *words, "--print-config")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_print_config_shows_a_flag_and_the_meaning_of_accuracy():
    result = in_process("train", "--epsilon_high", "0.28", "--reward_funcs", "accuracy", "format",
                        "--is_reward_customized_from_vlm_module", "False", "--print-config", check=True)
    assert "\nepsilon_high: 0.28\n" in result.stdout
    assert "\nreward_funcs: [jsonl_accuracy, format_answer]\n" in result.stdout
    result = in_process("train", "--reward_funcs", "accuracy", "format", "--is_reward_customized_from_vlm_module",
                        "--print-config", check=True)
    assert "\nreward_funcs: [iou, format]\n" in result.stdout


def test_sft_takes_sft_config_fields_as_flags():
    overrides, _ = parse_flags(["--completion_only_loss", "false", "--max-length", "512"], RECIPES["sft"])
    assert overrides == {"completion_only_loss": False, "max_length": 512}


def test_help_all_lists_every_grpo_field_and_help_stays_short():
    help_all = in_process("train", "--help-all", check=True).stdout
    assert all(f"--{name} " in help_all for name, _, _ in grpo_fields())
    assert "--epsilon_high VALUE" in help_all
    assert "--epsilon_high VALUE" not in in_process("train", "--help", check=True).stdout


@pytest.mark.parametrize("args, says", [
    # issue 53, item 7: a key given twice took the last value silently (the YAML refuses a key written twice)
    (["--learning_rate", "1e-5", "--learning_rate", "0.5"],
     "error: command line: --learning_rate and --learning_rate both give key 'learning_rate'; give it once"),
    (["--output_dir", "/tmp/b"], "error: command line: --output and --output_dir both give key 'output_dir'"),
    (["--reward_funcs", "iou", "--reward_funcs", "format"],
     "error: command line: --reward_funcs and --reward_funcs both give key 'reward_funcs'; give it once"),
    (["--set", "beta=0.1", "--beta", "0.2"], "error: command line: --set beta=... and --beta both give key 'beta'"),
    (["--set", "beta=0.1", "--set", "beta=0.2"], "error: command line: --set beta=... is given twice; give it once"),
    (["--output", "/tmp/b"], "Error: --output is given twice; give it once"),
])
def test_a_key_given_twice_on_the_command_line_is_refused(tiny, tmp_path, args, says):
    from click.testing import CliRunner

    from vlmgrpo.commands.cli import main

    result = CliRunner().invoke(main, ["train", "--model", tiny["model"], "--data", tiny["data"], "--image-root",
                                       tiny["image_root"], "--output", str(tmp_path / "out"), *args, "--dry-run"])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output, result.output
