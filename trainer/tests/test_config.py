import subprocess
import sys
from typing import Optional

import pytest
import yaml
from click.testing import CliRunner

from conftest import ENV
from vlmgrpo.commands.cli import main
from vlmgrpo.config.load import load_config, section_field_types, trl_field_types
from vlmgrpo.commands.grpo import GRPO
from vlmgrpo.commands.sft import SFT
from vlmgrpo.config.template import fill_template


def invoke(*args):
    return CliRunner().invoke(main, ["train", *args])


@pytest.mark.parametrize("command", [GRPO, SFT], ids=["train", "sft"])
def test_our_keys_do_not_shadow_trl_config_fields(command):
    from vlmgrpo.config.load import KEY_ALIASES

    assert not set(section_field_types(command)) & set(trl_field_types(command))
    # An alias must not hide a real key of either.
    assert not set(KEY_ALIASES) & (set(section_field_types(command)) | set(trl_field_types(command)))


@pytest.mark.parametrize("command", [GRPO, SFT], ids=["train", "sft"])
def test_the_recipe_config_is_trls_class_with_other_defaults_only(command):
    """config/trl_configs.py: each field the recipe's class overrides keeps TRL's type (the YAML is checked against
    it) and help (--print-config prints it); the class adds no field of its own."""
    import dataclasses
    import inspect
    import typing

    import trl

    ours = command.trl_config_class()
    base = getattr(trl, command.trl_class)
    assert issubclass(ours, base) and ours is not base
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(base)]
    hints, base_hints = typing.get_type_hints(ours), typing.get_type_hints(base)
    for name in inspect.get_annotations(ours):
        assert hints[name] == base_hints[name], name
        assert ours.__dataclass_fields__[name].metadata == base.__dataclass_fields__[name].metadata, name


def test_the_loaded_config_holds_the_recipe_config_object():
    config = load_config(None, {"beta": 0.07}, GRPO)
    assert type(config.trl).__name__ == "VLMR1GRPOConfig"
    assert (config.trl.beta, config.trl.num_generations, config.trl.epsilon_high) == (0.07, 8, None)
    assert config.is_set("beta") and not config.is_set("num_generations")


def test_recipe_defaults_follow_vlm_r1():
    config = load_config(None, {}, GRPO)
    assert config.trl.num_generations == 8 and config.trl.beta == 0.04
    assert config.trl.learning_rate == 1e-6 and config.trl.gradient_checkpointing is True
    assert config.model.attn_implementation == "auto"  # flash_attention_2 on sm80+ with flash_attn
    printed = yaml.safe_load(invoke("--print-config").stdout)
    # run_grpo_rec.sh: 2048 tokens; its trainer: per-sequence mean loss, GenerationConfig's sampling defaults.
    assert printed["max_completion_length"] == 2048 and printed["loss_type"] == "grpo"
    assert (printed["temperature"], printed["top_k"], printed["top_p"], printed["repetition_penalty"]) == (
        1.0, 50, 1.0, 1.0)
    assert printed["reward_funcs"] == ["iou", "format"] and printed["val_split_ratio"] == 0.0


def test_vlm_r1_spellings(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("use_peft: true\nfreeze_vision_modules: true\nreward_funcs: [accuracy, format]\n"
                    "question_template: '{Question} Answer in JSON.'\ndata_file_paths: a.jsonl:b.jsonl\n"
                    "image_folders: ra:rb\n")
    printed = yaml.safe_load(invoke("--config", str(path), "--print-config").stdout)
    assert printed["use_peft"] is True and printed["freeze_vision_tower"] is True
    assert printed["reward_funcs"] == ["jsonl_accuracy", "format"]  # accuracy: per row, as VLM-R1's default
    assert printed["data"] == ["a.jsonl:b.jsonl"] and printed["image_root"] == "ra:rb"
    assert not {"use_lora", "freeze_vision_modules", "data_file_paths", "image_folders"} & set(printed)
    assert fill_template(printed["question_template"], "Where?") == "Where? Answer in JSON."
    path.write_text("use_peft: true\nuse_lora: false\n")
    result = invoke("--config", str(path), "--print-config")
    assert result.exit_code == 2 and "keys 'use_peft' and 'use_lora' both set 'use_peft'; keep one" in result.output


def test_file_then_flags_then_set(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\nmax_steps: 5\nbeta: 0.1\nlr_scheduler_type: cosine\n")
    result = invoke("--config", str(path), "--max-steps", "7", "--set", "warmup_steps=3", "--set", "top_p=0.9",
                    "--print-config")
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    assert printed["max_steps"] == 7 and printed["beta"] == 0.1 and printed["warmup_steps"] == 3
    assert printed["lr_scheduler_type"] == "cosine" and printed["top_p"] == 0.9
    assert set(trl_field_types(GRPO)) <= set(printed)  # every GRPOConfig field is listed and settable


@pytest.mark.parametrize("content,expected", [
    ("lerning_rate: 0.1\n", "unknown key 'lerning_rate' (did you mean learning_rate"),
    ("learning_rate: fast\n", "key 'learning_rate': 'fast' is not valid, expected float"),
    ("lr_scheduler_type: wavy\n", "key 'lr_scheduler_type': 'wavy' is not valid, expected one of linear, cosine"),
    ("gradient_checkpointing: maybe\n", "expected bool"),
    ("attn_implementation: flash3\n",
     "key 'attn_implementation': 'flash3' is not one of: auto, flash_attention_4, flash_attention_2"),
    ("box_space: pixels\n", "key 'box_space': 'pixels' is not one of: absolute, norm1000"),
    ("- a list\n", "expected a mapping"),
    ("reward_funcs: [[iou, format]]\n", "key 'reward_funcs': [['iou', 'format']] is not valid, expected list of str"),
    ("judge_concurrency: 0\n", "key 'judge_concurrency': must be >= 1 (judge calls in flight at once), got 0"),
    ("judge_timeout: 0\n", "key 'judge_timeout': must be > 0 (seconds one judge call may take), got 0"),
    ("learning_rate: 1e-6\nseed: 1\nlearning_rate: 0.5\n",
     "bad.yaml:3: key 'learning_rate': written twice, on lines 1 and 3: YAML would keep the second silently"),
])
def test_bad_config_one_line_exit_2(tmp_path, content, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = invoke("--config", str(path), "--dry-run")
    assert result.exit_code == 2
    assert expected in result.output and str(path) in result.output
    assert len(result.output.strip().splitlines()) == 1


# A kilobyte whose aliases expand to a billion strings (nine levels of nine) under lora_target_modules, and nesting
# 50,000 deep there: PyYAML reads both; the value checks then walked the billion (a MemoryError at 6.4 GB after 90 s).
LAUGHS = "lora_target_modules: [" + ", ".join(f"&x{n} [{', '.join([f'*x{n - 1}' if n else 'q_proj'] * 9)}]"
                                              for n in range(9)) + "]\n"


@pytest.mark.parametrize("content, says", [
    (LAUGHS.encode(), ":1: aliases expand to more than 10,000 nodes (*x3 alone is 7,381); write the values out"),
    (b"lora_target_modules: " + b"[" * 50_000 + b"]" * 50_000 + b"\n", ":1: nested deeper than 100 levels"),
    (b"lora_target_modules: &a [q_proj, *a]\n", ":1: the alias *a stands inside its own anchor"),
    (b"lora_target_modules: [q_proj]\n# caf\xe9\n", ":2: not UTF-8: byte 0xe9 at column 6; save the file as UTF-8"),
])
def test_a_config_past_the_yaml_bounds_is_one_line_at_once(tmp_path, content, says):
    import resource
    import time

    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    started, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = invoke("--config", str(path), "--dry-run")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak  # kB: what the process's peak grew by
    assert time.monotonic() - started < 5 and grown < 256 * 1024
    assert result.exit_code == 2 and result.output.strip().splitlines() == [f"error: {path}{says}"]


def test_the_hub_token_is_never_printed():
    """issue 53, item 11: --print-config printed --hub_token, and OUTPUT/vlmgrpo_config.yaml (0644, the same text)
    held it in clear."""
    result = invoke("--hub_token", "hf_secret_of_this_test", "--print-config")
    assert result.exit_code == 0, result.output
    assert "hf_secret_of_this_test" not in result.stdout
    assert yaml.safe_load(result.stdout)["hub_token"] == "<given; not printed or saved>"
    assert yaml.safe_load(invoke("--print-config").stdout).get("hub_token") is None  # unset stays unset


def test_bad_set_value_names_the_command_line():
    result = invoke("--set", "num_generations=many", "--print-config")
    assert result.exit_code == 2 and "command line: key 'num_generations'" in result.output
    result = invoke("--set", "lora_target_modules=&a [q_proj, *a]", "--print-config")
    assert result.exit_code == 2 and result.output == ("error: --set lora_target_modules: the alias *a stands inside "
                                                       "its own anchor\n")


def test_batch_not_divisible_by_generations_is_explained(tmp_path):
    result = invoke("--model", "m", "--data", "x.jsonl", "--batch-size", "3", "--num-generations", "8",
                    "--set", "gradient_accumulation_steps=1", "--nproc-per-node", "2", "--dry-run")
    assert result.exit_code == 2
    assert "global batch 6 (per-device batch 3 x 2 processes x 1 steps per generation)" in result.output
    assert "num_generations 8" in result.output


def test_unknown_deepspeed_preset():
    result = invoke("--model", "m", "--data", "x.jsonl", "--deepspeed", "zero9", "--dry-run")
    assert result.exit_code == 2 and "neither a preset (zero2, zero3, zero3_offload)" in result.output


def test_deepspeed_presets_ship_in_the_package():
    from vlmgrpo.launch.torchrun import resolve_deepspeed

    for preset, stage in (("zero2", 2), ("zero3", 3), ("zero3_offload", 3)):
        import json

        assert json.load(open(resolve_deepspeed(preset)))["zero_optimization"]["stage"] == stage


@pytest.mark.slow
def test_bad_key_in_a_real_process_prints_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_name_or_path: m\nnum_generation: 4\n")
    result = subprocess.run([sys.executable, "-m", "vlmgrpo", "train", "--config", str(path)],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith(f"error: {path}: unknown key 'num_generation'")


def test_torchrun_command_and_shm_hint(monkeypatch):
    from vlmgrpo.launch import torchrun as launch
    from vlmgrpo.config.sections import RunConfig

    run = RunConfig(nproc_per_node=8, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=1234)
    command = launch.torchrun_command(run, ["train", "--config", "x.yaml"])
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node=8" in command and "--node-rank=1" in command and command[-3:] == [
        "train", "--config", "x.yaml"]
    monkeypatch.setattr(launch, "shm_bytes", lambda path="/dev/shm": 64 << 20)
    assert "--shm-size=16g" in launch.check_shm(run) and "--ipc=host" in launch.check_shm(run)
    assert launch.check_shm(RunConfig()) is None


def test_reward_weights_must_match_reward_funcs(tiny):
    result = invoke("--model", tiny["model"], "--data", "x.jsonl", "--set", "reward_weights=[1.0, 0.5, 2.0]",
                    "--dry-run")
    assert result.exit_code == 2 and "3 weights for 2 reward_funcs ['iou', 'format']" in result.output


def test_deepspeed_without_the_package_is_a_clear_error():
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    result = invoke("--model", "m", "--data", "x.jsonl", "--deepspeed", "zero3", "--dry-run")
    assert result.exit_code == 2 and "deepspeed package is not installed" in result.output


def test_the_3b_example_passes_every_check_that_needs_no_model_or_data():
    """examples/qwen2_5_vl_3b_rec_zero3.yaml on 8 GPUs: its reporter (tensorboard) is installed, its batch holds
    whole groups, and it is VLM-R1's REC run."""
    from conftest import REPO
    from vlmgrpo.launch.torchrun import check_batch, generation_batch
    from vlmgrpo.training.support import check_evaluation, check_reporting

    config = load_config(str(REPO / "examples" / "qwen2_5_vl_3b_rec_zero3.yaml"), {"nproc_per_node": 8}, GRPO)
    check_reporting(config)
    check_evaluation(config)
    check_batch(config, 8, generation_batch(config, 8))
    assert config.trl.report_to == "tensorboard" and config.trl.max_completion_length == 2048
    assert config.trl.loss_type == "grpo" and config.trl.top_k == 50


@pytest.mark.parametrize("command", [GRPO, SFT], ids=["train", "sft"])
def test_checkpointing_goes_under_the_name_the_installed_transformers_knows(tmp_path, command):
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing and warns at every start when
    given the old name; 4.x knows only the old name. Both get the recipe's checkpointing (SFTConfig's own default,
    for sft), neither warns."""
    import dataclasses
    import warnings

    from vlmgrpo.training.started import build_trl_config

    config = load_config(None, {"output_dir": str(tmp_path)}, command)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = build_trl_config(config, None)  # no DeepSpeed
    assert args.gradient_checkpointing is True
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(args)}:
        assert args.activation_checkpointing is True


@pytest.mark.parametrize("command, keys", [
    (GRPO, {"epsilon_high": 0.28, "loss_type": "dapo", "scale_rewards": "batch", "mask_truncated_completions": True}),
    (SFT, {"packing": True, "neftune_noise_alpha": 5.0, "completion_only_loss": False}),
], ids=["train", "sft"])
def test_a_trl_field_the_trainer_never_names_reaches_trl_from_the_yaml(tmp_path, command, keys):
    """Every field of GRPOConfig / SFTConfig is a key of the file: fields vlmgrpo has no option or default for
    arrive in the TRL config object the trainer is built with, as given."""
    from vlmgrpo.training.started import build_trl_config

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "m", "output_dir": str(tmp_path / "out"), **keys}))
    args = build_trl_config(load_config(str(path), {}, command), None)  # no DeepSpeed
    assert {key: getattr(args, key) for key in keys} == keys


def test_a_renamed_key_keeps_its_old_name_where_the_new_one_is_unknown_or_set():
    import dataclasses

    from vlmgrpo.training.started import under_current_names

    @dataclasses.dataclass
    class Transformers4Arguments:  # the old names only
        gradient_checkpointing: Optional[bool] = True
        gradient_checkpointing_kwargs: Optional[dict] = None

    @dataclasses.dataclass
    class Transformers5Arguments(Transformers4Arguments):
        activation_checkpointing: Optional[bool] = None
        activation_checkpointing_kwargs: Optional[dict] = None

    assert under_current_names(Transformers4Arguments()) == {}
    assert under_current_names(Transformers5Arguments()) == {"activation_checkpointing": True,
                                                            "gradient_checkpointing": None}
    assert under_current_names(Transformers5Arguments(activation_checkpointing=False)) == {}


def test_the_model_section_is_trls_model_config_with_vlmgrpos_defaults():
    import dataclasses

    import trl

    from vlmgrpo.config.model_config import ModelConfig

    assert issubclass(ModelConfig, trl.ModelConfig)
    assert {f.name for f in dataclasses.fields(trl.ModelConfig)} <= {f.name for f in dataclasses.fields(ModelConfig)}
    model = load_config(None, {}, GRPO).model
    assert (model.dtype, model.attn_implementation, model.lora_r, model.lora_alpha) == ("auto", "auto", 64, 128)
    assert model.use_bnb_nested_quant is True and model.lora_target_modules[:2] == ["q_proj", "k_proj"]
    # TRL turns a one-name list into a regex string; vlmgrpo keeps the names it joins into its own regex.
    assert load_config(None, {"lora_target_modules": ["q_proj"]}, GRPO).model.lora_target_modules == ["q_proj"]


@pytest.mark.parametrize("command", [GRPO, SFT], ids=["train", "sft"])
def test_earlier_key_names_are_aliases_of_the_canonical_ones(command, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("use_lora: true\ntorch_dtype: bfloat16\nbnb_4bit_use_double_quant: false\n")
    config = load_config(str(path), {}, command)
    assert (config.model.use_peft, config.model.dtype, config.model.use_bnb_nested_quant) == (True, "bfloat16", False)
    printed = yaml.safe_load(CliRunner().invoke(main, [command.name, "--config", str(path), "--print-config"]).stdout)
    assert printed["use_peft"] is True and printed["dtype"] == "bfloat16" and printed["use_bnb_nested_quant"] is False
    assert not {"use_lora", "torch_dtype", "bnb_4bit_use_double_quant"} & set(printed)


@pytest.mark.parametrize("command", [GRPO, SFT], ids=["train", "sft"])
def test_every_field_of_our_sections_has_help(command):
    import dataclasses

    missing = [f"{section.__name__}.{f.name}" for section in command.sections for f in dataclasses.fields(section)
               if not f.metadata.get("help")]
    assert not missing


def test_print_config_writes_each_keys_help_above_it():
    lines = invoke("--print-config").output.splitlines()

    def comment_above(key):
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        above = []
        while index and lines[index - 1].startswith("# "):
            index -= 1
            above.insert(0, lines[index][2:])
        return " ".join(above)

    assert comment_above("learning_rate") == "The initial learning rate for AdamW."  # TRL's (transformers') help
    assert comment_above("use_peft") == "Whether to use PEFT for training. (Also read as use_lora.)"
    assert comment_above("box_space").startswith("Space of the dataset's label boxes: absolute (pixels)")
    assert comment_above("dtype").endswith("(Also read as torch_dtype.)")


@pytest.mark.parametrize("key,value,accepted", [
    ("learning_rate", 1, True),  # an int where a float is expected
    ("learning_rate", True, False),  # a bool is not a number
    ("num_generations", True, False),
    ("num_generations", 4.0, False),
    ("lr_scheduler_type", "cosine", True),  # an enum member by its value
    ("lr_scheduler_type", "cosine_annealing", False),  # "SchedulerType | str" means a SchedulerType name
    ("report_to", ["tensorboard"], True),
    ("reward_weights", [1, 0.5], True),
    ("reward_weights", [1, "x"], False),
    ("gradient_checkpointing_kwargs", {"use_reentrant": False}, True),
    ("parallelism_config", {"anything": 1}, True),  # a class YAML cannot spell: TRL validates it
    ("max_pixels", "many", False),
])
def test_value_types(key, value, accepted):
    from vlmgrpo.errors import ConfigError

    try:
        load_config(None, {key: value}, GRPO)
    except ConfigError as error:
        assert not accepted, error
        assert str(error).startswith(f"command line: key '{key}': {value!r} is not valid, expected ")
    else:
        assert accepted


def test_a_yaml_exponent_without_a_dot_is_a_float(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 1e-6\n")
    assert load_config(str(path), {}, GRPO).trl.learning_rate == 1e-6


def test_a_run_that_would_train_zero_steps_is_refused_before_any_weights_load(tiny, tmp_path):
    """8 rows, 16 completions per device x 2 accumulation steps / 2 generations = 16 prompts per generation batch:
    TRL's sampler would hand out no whole batch, train 0 steps and save the untrained model."""
    result = invoke("--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                    "--output", str(tmp_path / "out"), "--batch-size", "16", "--num-generations", "2",
                    "--set", "gradient_accumulation_steps=2", "--dry-run")
    assert result.exit_code == 2
    assert "8 training row(s) make no whole generation batch of 16 prompts" in result.output
    assert "training would run 0 steps" in result.output and "Traceback" not in result.output
    enough = invoke("--model", tiny["model"], "--data", tiny["data"], "--image-root", tiny["image_root"],
                    "--output", str(tmp_path / "out"), "--batch-size", "8", "--num-generations", "2",
                    "--set", "gradient_accumulation_steps=2", "--dry-run")
    assert enough.exit_code == 0, enough.output
