"""`vlmgrpo alert-rules`: the run's alert rules (run/alerts.py) as YAML, with the thresholds given as options."""

from __future__ import annotations

import dataclasses

import click

from vlmgrpo.commands.options import fail
from vlmgrpo.errors import UserError
from vlmgrpo.run.alerts import AlertSettings, prometheus_rule, rules_file


def _options(command):
    """One option per AlertSettings field, its help and default from the field."""
    for setting in reversed(dataclasses.fields(AlertSettings)):
        command = click.option(f"--{setting.name.replace('_', '-')}", setting.name, type=type(setting.default),
                               default=setting.default, show_default=True, help=setting.metadata["help"])(command)
    return command


@click.command("alert-rules")
@click.option("--format", "form", type=click.Choice(["prometheus", "operator"]), default="prometheus",
              show_default=True, help="prometheus: a rules file (rule_files:); operator: a PrometheusRule for the "
              "Prometheus Operator.")
@_options
def alert_rules_command(form: str, **settings) -> None:
    """Print alert rules for training runs scraped by Prometheus: unhealthy, no progress, loss or reward not finite,
    rewards with zero spread, GPU memory near full, restarts, a target gone."""
    import yaml

    try:
        chosen = AlertSettings(**settings)
    except UserError as error:
        fail(error)
    document = rules_file(chosen) if form == "prometheus" else prometheus_rule(chosen)
    click.echo(yaml.safe_dump(document, sort_keys=False, width=120), nl=False)
