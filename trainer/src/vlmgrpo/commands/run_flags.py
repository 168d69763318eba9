"""The options `train`, `sft` and `score` share, and those only train and sft have, as the fields of dataclasses
(imagegen_contract.options makes the options): a field for a config key takes its help from that key's field, TRL's
(the copy in trl_help.py, so that `--help` imports no TRL) or vlmgrpo's section's, and `more` is what only the
command line adds. One configuration, read the same way by each command."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import click

from imagegen_contract.options import field_option, option_fields
from vlmgrpo.commands.options import all_flags_text, launch_help, section_help, trl_help
from vlmgrpo.config.sections import DataConfig, RunConfig


@dataclass
class RunFlags:
    """What every training command (and score) reads: the config file and the keys these options set."""
    config_path: Optional[str] = field(default=None, metadata={
        "help": "YAML file; any config key or field of the TRL config.", "flag": "--config"})
    model: Optional[str] = field(default=None, metadata=trl_help("model", "A local directory or a hub name."))
    adapter: Optional[str] = field(default=None, metadata=trl_help("adapter"))
    data: tuple[str, ...] = field(default=(), metadata=section_help(DataConfig, "data", "Repeatable."))
    eval_data: tuple[str, ...] = field(default=(), metadata=section_help(
        DataConfig, "eval_data", "Repeatable; or hold rows out with --set val_split_ratio=0.05."))
    image_root: Optional[str] = field(default=None, metadata=section_help(DataConfig, "image_root"))
    output: Optional[str] = field(default=None, metadata=trl_help("output", "Also metrics.jsonl and the final model."))
    max_steps: Optional[int] = field(default=None, metadata=trl_help("max_steps"))
    batch_size: Optional[int] = field(default=None, metadata=trl_help("batch_size",
                                                                      "Completions for train, rows for sft."))
    save_steps: Optional[int] = field(default=None, metadata=trl_help("save_steps"))
    resume: Optional[str] = field(default=None, metadata=section_help(RunConfig, "resume"))
    profile_steps: Optional[str] = field(default=None, metadata=section_help(RunConfig, "profile_steps") | {
        "metavar": "A:B"})
    max_restarts: Optional[int] = field(default=None, metadata=section_help(RunConfig, "max_restarts"))
    overwrite_output: Optional[bool] = field(default=None, metadata=section_help(RunConfig, "overwrite_output"))
    deepspeed: Optional[str] = field(default=None, metadata=trl_help("deepspeed",
                                                                     "Or a preset: zero2, zero3, zero3_offload."))
    # Without these flags, train and sft read the launch from the environment (launch/schedulers.py): Kubeflow Trainer
    # v2's PET_* variables, a PyTorchJob's, Slurm's, or NPROC_PER_NODE, NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT.
    nproc_per_node: Optional[int] = field(default=None, metadata=launch_help("nproc_per_node"))
    nnodes: Optional[int] = field(default=None, metadata=launch_help("nnodes"))
    node_rank: Optional[int] = field(default=None, metadata=launch_help("node_rank"))
    master_addr: Optional[str] = field(default=None, metadata=launch_help("master_addr"))
    master_port: Optional[int] = field(default=None, metadata=launch_help("master_port"))
    set_values: tuple[str, ...] = field(default=(), metadata={
        "help": "Any other field; repeatable.", "flag": "--set", "metavar": "KEY=VALUE"})


@dataclass
class TrainingFlags:
    """What only train and sft have: metrics, and the two ways to stop before training."""
    metrics_port: Optional[int] = field(default=None, metadata=section_help(RunConfig, "metrics_port",
                                                                            "health_* keys tune /health."))
    print_config: bool = field(default=False, metadata={"help": "Print the effective configuration and exit."})
    dry_run: bool = field(default=False, metadata={
        "help": "Run every check (config, paths, every data row), print a summary, load no weights."})
    help_all: bool = field(default=False, metadata={"help": "Show this help and every field as a flag, then exit."})


@dataclass
class ScoreFlags:
    """What only `score` has: the completions it scores."""
    completions_path: str = field(metadata={
        "help": 'JSONL file, one {"id": <a data row\'s id>, "completion": "<text>"} per line.', "flag": "--completions",
        "required": True})


def help_all_option(recipe):
    """--help-all: the command's help, then every field of its config as a flag."""
    def show(context: click.Context, _param, value: bool) -> None:
        if value and not context.resilient_parsing:
            click.echo(context.get_help())
            click.echo()
            click.echo(all_flags_text(recipe), nl=False)
            context.exit()

    (found,) = option_fields(TrainingFlags, "help_all")
    return field_option(found, bool, is_eager=True, expose_value=False, callback=show)
