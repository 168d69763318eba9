"""`vlmgrpo alert-rules`: the run's alert rules (monitoring/alerts.py) as YAML, with the thresholds given as options."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from imagegen_contract.options import field_options
from vlmgrpo.commands.fields import take, with_options
from vlmgrpo.commands.options import OnceCommand, fail
from vlmgrpo.errors import UserError
from vlmgrpo.monitoring.alerts import AlertSettings, prometheus_rule, rules_file


@dataclass
class RulesFormat:
    """The form the rules are printed in (the thresholds are AlertSettings')."""
    form: str = field(default="prometheus", metadata={
        "flag": "--format", "choices": ["prometheus", "operator"],
        "help": "prometheus: a rules file (rule_files:); operator: a PrometheusRule for the Prometheus Operator."})


@click.command("alert-rules", cls=OnceCommand)
@with_options(field_options(RulesFormat), field_options(AlertSettings))
def alert_rules_command(**given) -> None:
    """Print alert rules for training runs scraped by Prometheus: unhealthy, no progress, loss or reward not finite,
    rewards with zero spread, GPU memory near full, restarts, a target gone."""
    import yaml

    form = RulesFormat(**take(RulesFormat, given)).form
    try:
        chosen = AlertSettings(**take(AlertSettings, given))
    except UserError as error:
        fail(error)
    document = rules_file(chosen) if form == "prometheus" else prometheus_rule(chosen)
    click.echo(yaml.safe_dump(document, sort_keys=False, width=120), nl=False)
