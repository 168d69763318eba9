"""Every option of every command of both CLIs, `vlmgrpo` and `imagegen`, found by walking their click groups, is made
from a field of a settings dataclass (imagegen_contract/options.py): its flag and its help are the field's (the
help in the field's metadata, then what only the command line adds). An option written by hand, with help of its own,
has no field and fails here."""

from __future__ import annotations

import dataclasses

import click
import pytest

from imagegen_contract.options import field_option
from imagegen.cli.main import main as imagegen
from vlmgrpo.commands.cli import main as vlmgrpo, recipe_flags
from vlmgrpo.commands.run_flags import RunFlags, TrainingFlags
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.commands.trl_help import HELP as TRL_HELP
from vlmgrpo.config.sections import DataConfig, RunConfig, field_help
from vlmgrpo.serving.serve import ServeSettings


def walk(command: click.Command, path: tuple[str, ...]):
    """(the words that run it, the command) for a command and, for a group, every command under it."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from walk(sub, path + (name,))


COMMANDS = dict(walk(vlmgrpo, ("vlmgrpo",))) | dict(walk(imagegen, ("imagegen",)))


def expected(found: dataclasses.Field) -> tuple[str, str]:
    """The flag and the help an option made from this field has."""
    flag = found.metadata.get("flag") or "--" + found.name.replace("_", "-")
    return flag, " ".join(filter(None, (found.metadata["help"], found.metadata.get("more"))))


def options_not_from_fields(command: click.Command) -> list[str]:
    """The options of `command` not made from a field (the fields machinery hands each its field), or whose flag or
    help is not that field's. click's own --help and --version are click's."""
    wrong = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in ("help", "version"):
            continue
        found = getattr(param, "field", None)
        spelled = "/".join(param.opts + param.secondary_opts)  # --example/--no-example
        if found is None or (spelled, param.help) != expected(found):
            wrong.append(param.opts[0])
    return wrong


def test_the_walk_finds_every_command_of_both_clis():
    """Commands nested in a group (imagegen facts check) and those added from other modules (vlmgrpo lab) too."""
    assert {("imagegen", "facts", "check"), ("imagegen", "report"), ("vlmgrpo", "lab"), ("vlmgrpo", "merge"),
            ("vlmgrpo", "alert-rules"), ("vlmgrpo", "train")} <= set(COMMANDS)
    options = sum(isinstance(param, click.Option) for command in COMMANDS.values() for param in command.params)
    assert options > 150


@pytest.mark.parametrize("path", list(COMMANDS), ids=[" ".join(path) for path in COMMANDS])
def test_every_option_s_flag_and_help_are_a_field_s(path):
    assert options_not_from_fields(COMMANDS[path]) == []


def test_an_option_with_help_of_its_own_is_found():
    dtype = ServeSettings.__dataclass_fields__["dtype"]

    @click.command()
    @click.option("--port", type=int, default=8000, help="Written here, not in a field.")
    @click.option("--dtype", help=dtype.metadata["help"])  # a field's help, copied by hand
    @field_option(ServeSettings.__dataclass_fields__["engine"], str)
    @click.option("--own", help="No field at all.")
    def command(port, dtype, engine, own):
        """A command written by hand."""

    assert options_not_from_fields(command) == ["--port", "--dtype", "--own"]


def test_an_option_for_a_config_key_has_that_key_s_help():
    """The help of train's and sft's options for config keys is the key's own (TRL's, or vlmgrpo's section's), so
    `--help`, `--help-all` and `--print-config` say the same."""
    keyed = [found for settings in (RunFlags, TrainingFlags, recipe_flags(RECIPES["train"]))
             for found in dataclasses.fields(settings) if "key" in found.metadata]
    assert len(keyed) > 15
    for found in keyed:
        key, text = found.metadata["key"], found.metadata["help"]
        ours = [field_help(section, key) for section in (DataConfig, RunConfig)
                if key in section.__dataclass_fields__]
        assert text == (ours[0] if ours else TRL_HELP[key]), found.name
