"""The commands that use a trained model, `vlmgrpo eval` and `vlmgrpo serve`: their options and the checks before
any weight loads (registered on the CLI by cli.py)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Optional

import click

from imagegen_contract.options import field_options, flag, option_fields
from vlmgrpo.commands.fields import take, with_options
from vlmgrpo.commands.options import OnceCommand, collect_overrides, fail
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.errors import ConfigError, UserError
from vlmgrpo.evaluation.settings import EvalSettings, ScoringParts
from vlmgrpo.serving.requests import Limits
from vlmgrpo.serving.serve import ServeSettings


@dataclasses.dataclass
class EvalInputs:
    """What `vlmgrpo eval` reads: the config and the keys its options set. The help of each field is its option's."""
    config_path: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "YAML file: the training config (model, data, template, answer_box_space) or one of its own.",
        "flag": "--config"})
    model: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "Base or merged model directory, or hub name."})
    adapter: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "A PEFT adapter directory (a LoRA run's OUTPUT/adapter); its base model unless --model is given."})
    data: tuple[str, ...] = dataclasses.field(default=(), metadata={
        "help": "REC rows to evaluate (.jsonl/.json/mixture); repeatable; replaces the config's data."})
    image_root: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "Directory that relative image paths are resolved against."})
    set_values: tuple[str, ...] = dataclasses.field(default=(), metadata={
        "help": "Any other config key; repeatable.", "flag": "--set", "metavar": "KEY=VALUE"})
    dry_run: bool = dataclasses.field(default=False, metadata={
        "help": "Check the config and every row, print a summary, load no weights."})


def scoring_parts(config) -> ScoringParts:
    """What eval and score take of the training config they load."""
    from vlmgrpo.rewards.judge import Judge

    return ScoringParts(config.model, config.data.question_template, config.reward,
                        Judge.from_config(config.reward, config.where("judge_url")))


@click.command("eval", cls=OnceCommand)
@with_options(field_options(EvalInputs, "config_path", "model", "adapter", "data", "image_root"),
              field_options(EvalSettings), field_options(EvalInputs, "set_values", "dry_run"))
def eval_command(config_path: Optional[str], dry_run: bool, **given) -> None:
    """REC accuracy as VLM-R1 reports it: the share of answers whose first box has IoU >= 0.5 with the ground truth,
    per data file and overall. With jsonl_accuracy among the config's rewards, VLM-R1's other tasks: each row scored
    by its accuracy method, the mean per data file and overall. Writes OUTPUT/eval.json and OUTPUT/predictions.jsonl."""
    from vlmgrpo.config.load import load_config
    from vlmgrpo.evaluation.evaluate import evaluate
    from vlmgrpo.data.rows import load_checked_data
    from vlmgrpo.models.source import check_model_source

    settings = EvalSettings(**take(EvalSettings, given))
    try:
        for found in option_fields(EvalSettings, "max_samples", "batch_size", "max_new_tokens"):
            value = getattr(settings, found.name)
            if value is not None and value < 1:
                raise ConfigError(f"{flag(found)} {value}: give a whole number of at least 1")
        overrides = collect_overrides(given)
        config = load_config(config_path, overrides, RECIPES["train"])  # once: its reward note is logged once
        if "jsonl_accuracy" not in config.reward.reward_funcs:  # REC: every row needs a box to be scored against
            config = dataclasses.replace(config, reward=dataclasses.replace(config.reward, reward_funcs=["iou"]))
        check_model_source(config)
        data = load_checked_data(config)
        if dry_run:
            click.echo(data.summary())
            return
        tokens = settings.max_new_tokens or config.trl.max_completion_length or EvalSettings.max_new_tokens
        summary = evaluate(scoring_parts(config), data, dataclasses.replace(settings, max_new_tokens=tokens))
        shown = {key: summary[key] for key in ("accuracy", "correct", "total", "no_box") if key in summary}
        click.echo(json.dumps(shown | {"per_file": {path: found["accuracy"]
                                                    for path, found in summary["per_file"].items()}}))
    except UserError as error:
        fail(error)


@click.command("serve", context_settings={"ignore_unknown_options": True}, cls=OnceCommand)
@with_options(field_options(ServeSettings, "model", "served_name", "host", "port"),
              field_options(Limits, "api_key", "allowed_media_domains", "max_image_bytes", "max_image_pixels",
                            "max_images", "max_body_bytes", "max_in_flight", "read_timeout_s"),
              field_options(ServeSettings, "shutdown_grace_s", "engine", "dtype"))
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def serve_command(engine_args: tuple[str, ...], **given) -> None:
    """An OpenAI-compatible chat-completions endpoint (images included) for a trained model, served by vLLM or
    `transformers serve`. Arguments after `--` go to the engine as given. SIGTERM lets requests in flight finish
    (--shutdown-grace), refuses the rest, and logs which."""
    from vlmgrpo.serving.serve import serve

    limits = take(Limits, given)
    limits.update(api_key=limits["api_key"] or None,
                  allowed_media_domains=tuple(domain.lower() for domain in limits["allowed_media_domains"]))
    settings = take(ServeSettings, given)
    settings["served_name"] = settings["served_name"] or settings["model"]
    try:
        sys.exit(serve(ServeSettings(**settings, engine_args=list(engine_args), limits=Limits(**limits))))
    except UserError as error:
        fail(error)
