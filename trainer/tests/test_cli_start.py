"""The command line starts without trl or torch: `vlmgrpo info`, `selftest` and `make-tiny` run where trl is broken
or absent. (The package's size and import rules are tests/test_layout.py's, for imagegen and vlmgrpo alike.)"""

import subprocess
import sys

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
