"""Command line: vlmgrpo train | sft | merge | score | eval | serve | vllm-serve | info | selftest | make-tiny."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any, Optional

import click

from imagegen_contract.options import field_options
from vlmgrpo.commands.fields import take, with_options
from vlmgrpo.commands.options import OnceGroup, collect_overrides, fail, trl_help
from vlmgrpo.commands.run_flags import RunFlags, ScoreFlags, TrainingFlags, help_all_option
from vlmgrpo.commands.alerts import alert_rules_command
from vlmgrpo.commands.lab import lab_command
from vlmgrpo.commands.settings import MERGE_OPTIONS, MergeSettings, SelftestSettings, TinySettings
from vlmgrpo.commands.trained import eval_command, scoring_parts, serve_command
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.errors import UserError
from vlmgrpo.commands.recipe import Recipe

log = logging.getLogger("vlmgrpo")


class CurrentStderr(logging.StreamHandler):
    """A handler that writes to sys.stderr as it is when a message comes, not as it was when the handler was made:
    whatever swaps sys.stderr after the first command (click's test runner running commands in one process, a
    notebook cell) still gets the log lines."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:  # logging.StreamHandler.__init__ and setStream assign it: sys.stderr stays
        pass


def setup_logging() -> None:
    if log.handlers:
        return
    # One copy of each message per run, not one per process (a PyTorchJob pod's RANK is its index, not a worker's).
    worker = "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ
    if worker and os.environ.get("RANK", "0") != "0":
        log.setLevel(logging.ERROR)
        return
    handler = CurrentStderr()
    handler.setFormatter(logging.Formatter("vlmgrpo: %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


@click.group(cls=OnceGroup)
def main() -> None:
    """GRPO training of vision-language models on grounding data (VLM-R1's REC recipe on TRL), and supervised
    fine-tuning of language and vision-language models before it."""
    from vlmgrpo.image.environment import NoWritableHome, prepare

    try:
        prepare()  # a writable HOME and caches for any uid, with or without the image's entrypoint
    except NoWritableHome as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    setup_logging()


def check_driver() -> None:
    """On a GPU host, a driver older than the image needs is one line before anything loads CUDA."""
    from vlmgrpo.image.driver import main as driver_check

    if driver_check():
        sys.exit(1)


# The options `train`, `sft` and `score` share (run_flags.py: one configuration, read the same way by each), and
# those only train and sft have.
RUN_OPTIONS = field_options(RunFlags)
MONITOR_OPTIONS = field_options(TrainingFlags, "metrics_port")
TRAINING_OPTIONS = field_options(TrainingFlags, "print_config", "dry_run")


def recipe_flags(recipe: Recipe) -> type:
    """The options only this command has (GRPO's --num-generations, ...) as a dataclass: each for a field of its TRL
    config, unset (None) unless given, so the config file's value stands; a bool one is a flag (--use-vllm)."""
    return dataclasses.make_dataclass(f"{recipe.name.title()}Flags", [
        (option.flag.lstrip("-").replace("-", "_"), Optional[option.type],
         dataclasses.field(default=None, metadata=trl_help(option.flag, option.more))) for option in recipe.options])


def recipe_options(recipe: Recipe) -> list:
    return field_options(recipe_flags(recipe))


def run_command(recipe: Recipe, config_path: Optional[str], print_config: bool, dry_run: bool, options,
                extra: tuple[str, ...] = ()) -> None:
    """Every training command: load and check the configuration and every row, then train here or through
    torchrun. `extra` is what click did not know: fields as TRL's scripts take them (flags.py)."""
    from vlmgrpo.launch.torchrun import exit_on_signal_until_training, run_torchrun, torchrun_command

    exit_on_signal_until_training()  # first: the imports below take seconds
    check_driver()
    try:
        said: dict[str, str] = {}  # how the command line gave each key: one key given twice is an error
        overrides = collect_overrides(options, said)
        overrides.update(flag_overrides(recipe, extra, said))
        launch = discover_launch(overrides)  # before config.load's TRL import: a contradiction is said at once
        from vlmgrpo.config.dump import dump_config
        from vlmgrpo.config.load import load_config
        from vlmgrpo.training.output import clear_earlier_run

        config = load_config(config_path, overrides, recipe, launch)
        if print_config:
            click.echo(dump_config(config), nl=False)
            return
        from vlmgrpo.training.plan import make_plan

        plan = make_plan(config)
        if dry_run:
            from vlmgrpo.data.datasets import decode_images

            decode_images(plan.data)
            click.echo(plan.data.summary())
            click.echo("not checked (devices): " + "; ".join(plan.launch.devices))
            return
        removed = clear_earlier_run(plan.output, config.where("overwrite_output"))
        if removed:
            log.info("--overwrite-output: removed %s from %s", ", ".join(removed), plan.output.directory)
        if plan.launch.shm_hint:
            log.warning(plan.launch.shm_hint)
        if plan.launch.through_torchrun:
            log.info("launching %s", " ".join(torchrun_command(config.run, sys.argv[1:])))
            sys.exit(run_torchrun(config.run, sys.argv[1:]))
        sys.exit(recipe.run(plan))
    except UserError as error:
        fail(error)


def flag_overrides(recipe: Recipe, extra: tuple[str, ...], said: dict[str, str]) -> dict[str, Any]:
    from vlmgrpo.commands.flags import parse_flags

    overrides, notes = parse_flags(extra, recipe, said)
    for note in notes:
        log.warning(note)
    return overrides


def discover_launch(overrides: dict[str, Any]):
    """The launch the environment describes (a scheduler's variables), for the keys no flag set."""
    from vlmgrpo.launch.schedulers import KEYS, discover

    def visible_gpus() -> int:
        import torch

        return torch.cuda.device_count()

    return discover(os.environ, given={key for key in KEYS if key in overrides}, gpu_count=visible_gpus)


def register(recipe: Recipe) -> None:
    """`vlmgrpo <recipe.name>` with the options every training command has and the recipe's own."""

    @click.pass_context
    def command(context: click.Context, config_path: Optional[str], print_config: bool, dry_run: bool,
                **options) -> None:
        run_command(recipe, config_path, print_config, dry_run, options, tuple(context.args))

    decorate = with_options(RUN_OPTIONS, recipe_options(recipe), MONITOR_OPTIONS, TRAINING_OPTIONS,
                            [help_all_option(recipe)])
    # What click does not know passes through to flags.py: every field of the TRL config as a flag, as TRL's scripts.
    settings = {"ignore_unknown_options": True, "allow_extra_args": True}
    main.command(recipe.name, help=recipe.summary, context_settings=settings,
                 epilog=f"Every other field is a flag too, as TRL's scripts take them (--epsilon_high 0.28, --bf16, "
                        f"--reward_funcs accuracy format): `vlmgrpo {recipe.name} --help-all` lists them.")(
        decorate(command))


for _recipe in RECIPES.values():
    register(_recipe)


@main.command()
@with_options(RUN_OPTIONS, recipe_options(RECIPES["train"]), field_options(ScoreFlags))
def score(config_path: Optional[str], completions_path: str, **options) -> None:
    """Score completions with the configured rewards, without training: one JSON line per completion,
    {"id": ..., "rewards": {"iou": ..., "format": ...}}. The model directory is read only for its processor."""
    from vlmgrpo.config.load import load_config
    from vlmgrpo.data.rows import load_scored_rows
    from vlmgrpo.models.source import check_model_source
    from vlmgrpo.rewards import reward_functions
    from vlmgrpo.evaluation.score import score_completions

    try:
        config = load_config(config_path, collect_overrides(options), RECIPES["train"])
        check_model_source(config)
        custom = reward_functions(config)  # the custom reward functions, imported once
        for line in score_completions(scoring_parts(config), load_scored_rows(config), completions_path, custom):
            click.echo(json.dumps(line))
    except UserError as error:
        fail(error)


@main.command()
@with_options(field_options(MergeSettings, *MERGE_OPTIONS))
def merge(**given) -> None:
    """Merge a LoRA adapter into its base model and save the result (safetensors, with the processor or tokenizer)."""
    from vlmgrpo.config.model_config import ModelConfig
    from vlmgrpo.errors import ConfigError
    from vlmgrpo.models.loading import merge_adapter
    from vlmgrpo.access import unwritable_directory
    from vlmgrpo.models.source import check_model
    from vlmgrpo.training.output import check_output_apart

    settings = MergeSettings(**take(MergeSettings, given))
    adapter, output = settings.adapter, settings.output
    try:
        # The model section alone: a merge loads no data, no rewards and no training config.
        model, origins = ModelConfig(model_name_or_path=settings.model, adapter_name_or_path=adapter), {}
        check_model(model, lambda key: origins.get(key, "command line"), origins)
        check_output_apart("--output", output, {"the base model": model.model_name_or_path,
                                                "the adapter (--adapter)": adapter})
        problem = unwritable_directory(output)
        if problem:
            raise ConfigError(f"--output: {problem}")
        if os.path.exists(output) and os.listdir(output) and not settings.overwrite_output:
            raise ConfigError(f"--output: {output} exists and is not empty; choose another --output, or replace it "
                              "with --overwrite-output")
        merge_adapter(adapter, model.model_name_or_path, output)
    except UserError as error:
        fail(error)


@main.command()
def info() -> None:
    """Library versions and hardware as JSON."""
    from vlmgrpo.image.info import collect_info

    click.echo(json.dumps(collect_info(), indent=2))


@main.command()
@with_options(field_options(SelftestSettings))
def selftest(**given) -> None:
    """In-image checks as JSON; exit 0 when nothing failed, 1 otherwise."""
    from vlmgrpo.image.selftest import run_selftest

    settings = SelftestSettings(**take(SelftestSettings, given))
    check_driver()
    report = run_selftest(settings.expected, require_gpu=settings.require_gpu, skip_train=settings.skip_train,
                          skip_versions=settings.skip_versions)
    click.echo(json.dumps(report, indent=2))
    sys.exit(1 if report["failed"] else 0)


@main.command("make-tiny")
@with_options(field_options(TinySettings))
def make_tiny_command(**given) -> None:
    """A tiny random model made locally, with data: a vision-language model (Qwen2.5-VL, Qwen2-VL, InternVL) and a
    rectangle-grounding dataset, or a text-only causal LM (Qwen2, Llama) and chat rows in the SFT formats."""
    from vlmgrpo.models.tiny import make_tiny

    settings = TinySettings(**take(TinySettings, given))
    click.echo(json.dumps(make_tiny(settings.out, rows=settings.rows, seed=settings.seed, family=settings.family)))


@main.command("vllm-serve", add_help_option=False,
              context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def vllm_serve(args: tuple[str, ...]) -> None:
    """TRL's vLLM server for `vllm_mode: server` (`trl vllm-serve ARGS`, e.g. --model M --tensor-parallel-size 1
    --port 8000); every argument goes to it as given (its --help lists them). Images named -vllm<X.Y> have vLLM."""
    from vlmgrpo.training.rollouts import exec_vllm_serve

    try:
        exec_vllm_serve(list(args))
    except UserError as error:
        fail(error)


main.add_command(eval_command)
main.add_command(serve_command)
main.add_command(alert_rules_command)
main.add_command(lab_command)
