"""The command line starts without trl or torch: `vlmgrpo info`, `selftest` and `make-tiny` run where trl is broken
or absent. (The package's size and import rules are tests/test_layout.py's, for imagegen and vlmgrpo alike.)"""

import subprocess
import sys

import pytest

from conftest import ENV


def test_the_command_line_starts_without_trl_or_torch():
    """`vlmgrpo info`, `selftest` and `make-tiny` must start where trl is broken or absent; training commands
    import it after their signal handler is in place."""
    code = "import sys, vlmgrpo.commands.cli; print(sorted({'trl', 'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.stdout.strip() == "[]", result.stderr[-2000:]


def test_an_option_for_a_key_of_vlmgrpos_sections_says_what_the_field_says():
    """One help text per key: the options of train and sft that set a field of sections.py show that field's help
    (the command line may add to it), the same text `--print-config` writes above the key."""
    from dataclasses import fields

    import click

    from vlmgrpo.commands.cli import main
    from vlmgrpo.config.sections import DataConfig, RunConfig

    helps = {f.name: f.metadata["help"] for section in (DataConfig, RunConfig) for f in fields(section)}
    for command in ("train", "sft"):
        options = [p for p in main.commands[command].params if isinstance(p, click.Option) and p.name in helps]
        assert len(options) >= 12, [p.name for p in options]
        for option in options:
            assert option.help.startswith(helps[option.name]), (command, option.name)
    launch = next(p for p in main.commands["train"].params if p.name == "master_port")
    assert launch.help.endswith("else 29500."), launch.help


@pytest.mark.slow  # imports TRL: seconds
def test_the_copied_trl_help_is_what_the_installed_trl_says():
    """`--help` shows TRL's own help for the options that set a TRL field, copied so that it need not import TRL; a
    TRL whose help changed makes the copy stale, and this says how to renew it."""
    import importlib.util
    from pathlib import Path

    from vlmgrpo.commands import trl_help

    path = Path(__file__).resolve().parents[1] / "scripts/trl_help.py"
    spec = importlib.util.spec_from_file_location("trl_help_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.table() == trl_help.HELP, "stale: run python trainer/scripts/trl_help.py"
    # And every field's kind and help, which `--help-all` lists (trl_fields.json).
    assert script.generate_fields() == script.FIELDS_TARGET.read_text(), "stale: run python trainer/scripts/trl_help.py"


def test_every_option_of_train_and_sft_has_help_and_a_trl_fields_option_starts_with_its_help():
    import click

    from vlmgrpo.commands.cli import main
    from vlmgrpo.commands.options import RENAMED, TRL_KEYS
    from vlmgrpo.commands.trl_help import HELP

    assert {"model_name_or_path", "output_dir", "max_steps", "num_generations", "use_vllm"} <= TRL_KEYS
    for command in ("train", "sft"):
        for option in main.commands[command].params:
            if not isinstance(option, click.Option) or option.name == "help":
                continue
            assert option.help, (command, option.name)
            key = RENAMED.get(option.name, option.name)
            if key in TRL_KEYS:
                assert option.help.startswith(HELP[key]), (command, option.name)
    batch = next(p for p in main.commands["sft"].params if p.name == "batch_size")
    assert batch.help == "The batch size per device for training. Completions for train, rows for sft."
