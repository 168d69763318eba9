"""Command line: vlmgrpo train | score | info | selftest | make-tiny."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Optional

import click

from .errors import UserError
from .tiny import FAMILIES

log = logging.getLogger("vlmgrpo")


def setup_logging() -> None:
    if log.handlers:
        return
    # One copy of each message per run, not one per process.
    if os.environ.get("RANK", "0") != "0":
        log.setLevel(logging.ERROR)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("vlmgrpo: %(levelname)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def fail(error: UserError) -> None:
    click.echo(f"error: {error}", err=True)
    sys.exit(error.exit_code)


@click.group()
def main() -> None:
    """GRPO training of vision-language models on grounding data (VLM-R1's REC recipe on TRL)."""
    setup_logging()


def collect_overrides(options: dict[str, Any]) -> dict[str, Any]:
    from .config import parse_set

    renamed = {
        "model": "model_name_or_path",
        "image_root": "image_root",
        "output": "output_dir",
        "max_steps": "max_steps",
        "num_generations": "num_generations",
        "batch_size": "per_device_train_batch_size",
        "max_completion_length": "max_completion_length",
        "save_steps": "save_steps",
        "resume": "resume",
        "overwrite_output": "overwrite_output",
        "deepspeed": "deepspeed",
        "nproc_per_node": "nproc_per_node",
        "nnodes": "nnodes",
        "node_rank": "node_rank",
        "master_addr": "master_addr",
        "master_port": "master_port",
    }
    overrides = parse_set(options["set_values"])
    for option, key in renamed.items():
        if options[option] is not None:
            overrides[key] = options[option]
    if options["data"]:
        overrides["data"] = list(options["data"])
    return overrides


# The options `train` and `score` share: one configuration, read the same way by both.
RUN_OPTIONS = [
    click.option("--config", "config_path", type=str, help="YAML file; any config key or trl.GRPOConfig field."),
    click.option("--model", help="Local model directory or hub name."),
    click.option("--data", multiple=True, help="Data file (.jsonl/.json) or mixture (.yaml); repeatable; "
                 "VLM-R1's ':'-joined lists work too."),
    click.option("--image-root", help="Directory that relative image paths are resolved against (':'-joined: one "
                 "per data file)."),
    click.option("--output", help="Output directory (checkpoints, metrics.jsonl, final model)."),
    click.option("--max-steps", type=int),
    click.option("--num-generations", type=int),
    click.option("--batch-size", type=int, help="Per-device train batch size (completions)."),
    click.option("--max-completion-length", type=int),
    click.option("--save-steps", type=int),
    click.option("--resume", help="auto (latest checkpoint under --output, fresh if none) or a checkpoint directory."),
    click.option("--overwrite-output", is_flag=True, default=None,
                 help="Start over in an output directory that holds an earlier run (removes its checkpoints and "
                      "logs)."),
    click.option("--deepspeed", help="zero2, zero3, zero3_offload or a DeepSpeed JSON file."),
    click.option("--nproc-per-node", type=int, envvar="NPROC_PER_NODE"),
    click.option("--nnodes", type=int, envvar="NNODES"),
    click.option("--node-rank", type=int, envvar="NODE_RANK"),
    click.option("--master-addr", envvar="MASTER_ADDR"),
    click.option("--master-port", type=int, envvar="MASTER_PORT"),
    click.option("--set", "set_values", multiple=True, metavar="KEY=VALUE", help="Any other field; repeatable."),
]


def run_options(command):
    for option in reversed(RUN_OPTIONS):
        command = option(command)
    return command


@main.command()
@run_options
@click.option("--print-config", is_flag=True, help="Print the effective configuration and exit.")
@click.option("--dry-run", is_flag=True, help="Run every check (config, paths, every data row), print a summary, "
              "load no model.")
def train(config_path: Optional[str], print_config: bool, dry_run: bool, **options) -> None:
    """Train with GRPO. Exit codes: 0 done, 2 bad config/data, 143 (SIGTERM) / 130 (SIGINT) after a checkpoint."""
    from .launch import check_shm, exit_on_signal_until_training, needs_launch, run_torchrun, torchrun_command

    exit_on_signal_until_training()  # first: the imports below take seconds
    from .config import dump_config, load_config
    from .preflight import clear_earlier_run, validate
    from .train import run_training

    try:
        config = load_config(config_path, collect_overrides(options))
        if print_config:
            click.echo(dump_config(config), nl=False)
            return
        data = validate(config)
        if dry_run:
            click.echo(data.summary())
            return
        removed = clear_earlier_run(config)
        if removed:
            log.info("--overwrite-output: removed %s from %s", ", ".join(removed), config.grpo["output_dir"])
        hint = check_shm(config.run)
        if hint:
            log.warning(hint)
        if needs_launch(config.run):
            log.info("launching %s", " ".join(torchrun_command(config.run, sys.argv[1:])))
            sys.exit(run_torchrun(config.run, sys.argv[1:]))
        sys.exit(run_training(config, data))
    except UserError as error:
        fail(error)


@main.command()
@run_options
@click.option("--completions", "completions_path", required=True,
              help='JSONL file, one {"id": <a data row\'s id>, "completion": "<text>"} per line.')
def score(config_path: Optional[str], completions_path: str, **options) -> None:
    """Score completions with the configured rewards, without training: one JSON line per completion,
    {"id": ..., "rewards": {"iou": ..., "format": ...}}. The model directory is read only for its processor."""
    from .config import load_config
    from .preflight import check_model_source, load_checked_data
    from .score import score_completions

    try:
        config = load_config(config_path, collect_overrides(options))
        check_model_source(config)
        for line in score_completions(config, load_checked_data(config), completions_path):
            click.echo(json.dumps(line))
    except UserError as error:
        fail(error)


@main.command()
def info() -> None:
    """Library versions and hardware as JSON."""
    from .info import collect_info

    click.echo(json.dumps(collect_info(), indent=2))


@main.command()
@click.option("--expected", type=str, default=None, help="Expected versions JSON (default $IMAGEGEN_EXPECTED or "
              "/etc/imagegen/expected.json).")
@click.option("--require-gpu", is_flag=True, help="GPU checks fail instead of skip when no GPU is visible.")
@click.option("--skip-train", is_flag=True, help="Skip the tiny two-step GRPO run.")
def selftest(expected: Optional[str], require_gpu: bool, skip_train: bool) -> None:
    """In-image checks as JSON; exit 0 when nothing failed, 1 otherwise."""
    from .selftest import run_selftest

    report = run_selftest(expected, require_gpu=require_gpu, skip_train=skip_train)
    click.echo(json.dumps(report, indent=2))
    sys.exit(1 if report["failed"] else 0)


@main.command("make-tiny")
@click.option("--out", required=True, help="Directory for model/ and data/.")
@click.option("--rows", type=int, default=16, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--family", type=click.Choice(FAMILIES), default=FAMILIES[0], show_default=True)
def make_tiny_command(out: str, rows: int, seed: int, family: str) -> None:
    """A tiny random Qwen2.5-VL (or Qwen2-VL, InternVL) and a rectangle-grounding dataset, made locally."""
    from .tiny import make_tiny

    click.echo(json.dumps(make_tiny(out, rows=rows, seed=seed, family=family)))
