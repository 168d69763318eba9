"""Every option of `vlmgrpo train`, `sft`, `score`, `eval`, `serve` and `imagegen build`, `push`, `test` is made
from a field of a settings dataclass: its flag and its help are the field's (the help in the field's metadata, then
what only the command line adds). An option written by hand, with help of its own, has no such field and fails here."""

from __future__ import annotations

import dataclasses

import click
import pytest

from imagegen.cli.main import main as imagegen
from imagegen.cli import settings as image_settings
from imagegen.cli.settings import BuildSettings, PushSettings, WorkspaceFlags
from imagegen.matrix.select import Selection
from vlmgrpo.commands.cli import main as vlmgrpo, recipe_flags
from vlmgrpo.commands.run_flags import RunFlags, ScoreFlags, TrainingFlags
from vlmgrpo.commands.trained import EvalInputs
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.commands.trl_help import HELP as TRL_HELP
from vlmgrpo.config.sections import DataConfig, RunConfig, field_help
from vlmgrpo.evaluation.settings import EvalSettings
from vlmgrpo.serving.requests import Limits
from vlmgrpo.serving.serve import ServeSettings

SETTINGS = {
    (vlmgrpo, "train"): (RunFlags, recipe_flags(RECIPES["train"]), TrainingFlags),
    (vlmgrpo, "sft"): (RunFlags, recipe_flags(RECIPES["sft"]), TrainingFlags),
    (vlmgrpo, "score"): (RunFlags, recipe_flags(RECIPES["train"]), ScoreFlags),
    (vlmgrpo, "eval"): (EvalInputs, EvalSettings),
    (vlmgrpo, "serve"): (ServeSettings, Limits),
    (imagegen, "build"): (Selection, BuildSettings, WorkspaceFlags),
    (imagegen, "push"): (Selection, PushSettings, WorkspaceFlags),
    (imagegen, "test"): (Selection, image_settings.TestSettings, WorkspaceFlags),
}


def expected(found: dataclasses.Field) -> tuple[str, str]:
    """The flag and the help an option made from this field has."""
    flag = found.metadata.get("flag") or "--" + found.name.replace("_", "-")
    return flag, " ".join(filter(None, (found.metadata["help"], found.metadata.get("more"))))


def options_not_from_fields(command: click.Command, settings: tuple[type, ...]) -> list[str]:
    """The options of `command` whose flag or help is not that of a field of `settings` with help metadata."""
    fields = {found.name: found for each in settings for found in dataclasses.fields(each) if "help" in found.metadata}
    wrong = []
    for param in command.params:
        if not isinstance(param, click.Option) or param.name == "help":  # click's own --help
            continue
        found = fields.get(param.name) or next((f for f in fields.values() if expected(f)[0] in param.opts), None)
        if found is None or (param.opts[0], param.help) != expected(found):
            wrong.append(param.opts[0])
    return wrong


@pytest.mark.parametrize("group, name", list(SETTINGS), ids=[f"{g.name}-{n}" for g, n in SETTINGS])
def test_every_option_s_flag_and_help_are_a_field_s(group, name):
    command = group.commands[name]
    assert options_not_from_fields(command, SETTINGS[group, name]) == []
    assert sum(isinstance(param, click.Option) for param in command.params) > 5


def test_an_option_with_help_of_its_own_is_found():
    @click.command()
    @click.option("--port", type=int, default=8000, help="Written here, not in a field.")
    @click.option("--dtype", help=ServeSettings.__dataclass_fields__["dtype"].metadata["help"])
    @click.option("--own", help="No field at all.")
    def command(port, dtype, own):
        """A command written by hand."""

    assert options_not_from_fields(command, (ServeSettings,)) == ["--port", "--own"]


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
