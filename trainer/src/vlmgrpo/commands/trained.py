"""The commands that use a trained model, `vlmgrpo eval` and `vlmgrpo serve`: their options and the checks before
any weight loads (registered on the CLI by cli.py)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import click

from vlmgrpo.commands.options import collect_overrides, fail
from vlmgrpo.commands.training import RECIPES
from vlmgrpo.errors import ConfigError, UserError
from vlmgrpo.serving.drain import SHUTDOWN_GRACE_S
from vlmgrpo.serving.serve import API_KEY_VARIABLE, ENGINES, HOST_VARIABLE
from vlmgrpo.serving.requests import Limits


@click.command("eval")
@click.option("--config", "config_path", type=str, help="YAML file: the training config (model, data, template, "
              "answer_box_space) or one of its own.")
@click.option("--model", help="Base or merged model directory, or hub name.")
@click.option("--adapter", help="A PEFT adapter directory (a LoRA run's OUTPUT/adapter); its base model unless "
              "--model is given.")
@click.option("--data", multiple=True, help="REC rows to evaluate (.jsonl/.json/mixture); repeatable; replaces the "
              "config's data.")
@click.option("--image-root", help="Directory that relative image paths are resolved against.")
@click.option("--output", required=True, help="Directory for eval.json and predictions.jsonl.")
@click.option("--max-samples", type=int, help="Evaluate the first N rows of each data file.")
@click.option("--batch-size", "eval_batch_size", type=int, default=8, show_default=True,
              help="Rows per generation batch.")
@click.option("--max-new-tokens", type=int, help="Tokens generated per answer (default: the config's "
              "max_completion_length, else 256).")
@click.option("--completions", "completions_path", help='Score these completions instead of generating: JSONL, one '
              '{"id": <a data row\'s id>, "completion": "<text>"} per line (the format `score` reads).')
@click.option("--set", "set_values", multiple=True, metavar="KEY=VALUE", help="Any other config key; repeatable.")
@click.option("--dry-run", is_flag=True, help="Check the config and every row, print a summary, load no weights.")
def eval_command(config_path: Optional[str], output: str, max_samples: Optional[int], eval_batch_size: int,
                 max_new_tokens: Optional[int], completions_path: Optional[str], dry_run: bool, **options) -> None:
    """REC accuracy as VLM-R1 reports it: the share of answers whose first box has IoU >= 0.5 with the ground truth,
    per data file and overall. With jsonl_accuracy among the config's rewards, VLM-R1's other tasks: each row scored
    by its accuracy method, the mean per data file and overall. Writes OUTPUT/eval.json and OUTPUT/predictions.jsonl."""
    from vlmgrpo.config.load import load_config
    from vlmgrpo.evaluation.evaluate import EvalSettings, evaluate
    from vlmgrpo.run.preflight import check_model_source, load_checked_data

    try:
        for name, value in (("--max-samples", max_samples), ("--batch-size", eval_batch_size),
                            ("--max-new-tokens", max_new_tokens)):
            if value is not None and value < 1:
                raise ConfigError(f"{name} {value}: give a whole number of at least 1")
        overrides = collect_overrides(options)
        config = load_config(config_path, overrides, RECIPES["train"])
        if "jsonl_accuracy" not in config.reward.reward_funcs:  # REC: every row needs a box to be scored against
            config = load_config(config_path, {"reward_funcs": ["iou"], **overrides}, RECIPES["train"])
        check_model_source(config)
        data = load_checked_data(config)
        if dry_run:
            click.echo(data.summary())
            return
        tokens = max_new_tokens or config.trl.get("max_completion_length") or 256
        summary = evaluate(config, data, EvalSettings(output, max_samples, eval_batch_size, tokens, completions_path))
        shown = {key: summary[key] for key in ("accuracy", "correct", "total", "no_box") if key in summary}
        click.echo(json.dumps(shown | {"per_file": {path: found["accuracy"]
                                                    for path, found in summary["per_file"].items()}}))
    except UserError as error:
        fail(error)


@click.command("serve", context_settings={"ignore_unknown_options": True})
@click.option("--model", required=True, help="Model directory (a run's OUTPUT or OUTPUT/merged) or hub name.")
@click.option("--served-model-name", help="The name clients put in \"model\" (default: --model as given).")
@click.option("--host", default="127.0.0.1", envvar=HOST_VARIABLE, show_default=True,
              help=f"Where to listen (or {HOST_VARIABLE}, which the images set to 0.0.0.0: set an API key there).")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--api-key", envvar=API_KEY_VARIABLE, help=f"Required of every request but /health, as "
              f"'Authorization: Bearer KEY' (or {API_KEY_VARIABLE}).")
@click.option("--allowed-media-domains", multiple=True, help="Hosts whose image URLs are fetched (by this server: "
              "no redirects, public addresses only); none by default: images come inline as data: URLs. Repeatable.")
@click.option("--max-image-bytes", type=click.IntRange(1), default=Limits.max_image_bytes, show_default=True)
@click.option("--max-image-pixels", type=click.IntRange(1), default=Limits.max_image_pixels, show_default=True)
@click.option("--max-images", type=click.IntRange(0), default=Limits.max_images, show_default=True,
              help="Images one request may carry.")
@click.option("--max-body-bytes", type=click.IntRange(1), default=Limits.max_body_bytes, show_default=True)
@click.option("--max-in-flight", type=click.IntRange(1), default=Limits.max_in_flight, show_default=True,
              help="Requests served at once; more are answered 429.")
@click.option("--read-timeout", type=click.FloatRange(0.1), default=Limits.read_timeout_s, show_default=True,
              help="Seconds a request's headers and body may take to arrive: a connection still sending its headers "
              "is closed, a body still arriving is answered 408.")
@click.option("--shutdown-grace", type=click.FloatRange(0), default=SHUTDOWN_GRACE_S, show_default=True,
              help="Seconds the requests in flight at SIGTERM get to finish (new ones are answered 503); those "
              "still running then are refused with a 503. The default fits Kubernetes' 30 s before it kills a pod; "
              "give `docker stop` more than this (its default is 10 s: `docker stop -t 35`).")
@click.option("--engine", type=click.Choice(ENGINES), default="auto", show_default=True,
              help="auto: vLLM where it is installed and a GPU is visible, else transformers serve.")
@click.option("--dtype", default="auto", show_default=True, help="Weights' dtype for the engine.")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def serve_command(model: str, served_model_name: Optional[str], host: str, port: int, api_key: Optional[str],
                  allowed_media_domains: tuple[str, ...], max_image_bytes: int, max_image_pixels: int,
                  max_images: int, max_body_bytes: int, max_in_flight: int, read_timeout: float,
                  shutdown_grace: float, engine: str, dtype: str, engine_args: tuple[str, ...]) -> None:
    """An OpenAI-compatible chat-completions endpoint (images included) for a trained model, served by vLLM or
    `transformers serve`. Arguments after `--` go to the engine as given. SIGTERM lets requests in flight finish
    (--shutdown-grace), refuses the rest, and logs which."""
    from vlmgrpo.serving.serve import ServeSettings, serve

    try:
        limits = Limits(api_key or None, tuple(domain.lower() for domain in allowed_media_domains), max_body_bytes,
                        max_image_bytes, max_image_pixels, max_images=max_images, max_in_flight=max_in_flight,
                        read_timeout_s=read_timeout)
        sys.exit(serve(ServeSettings(model, served_model_name or model, host, port, engine, dtype,
                                     list(engine_args), limits, shutdown_grace)))
    except UserError as error:
        fail(error)
