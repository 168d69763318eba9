"""Alert rules on the metrics a run serves (exporter.py), as a Prometheus rules file or as the Prometheus Operator's
PrometheusRule: `vlmgrpo alert-rules`. The thresholds are settings with their defaults explained; the rule expressions
live here only, and examples/monitoring/ holds them rendered with the defaults (a test keeps the two equal)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from vlmgrpo.errors import UserError

# A frozen run stops answering scrapes, and Prometheus marks its series stale at once; `last_over_time` over this
# window still sees the last samples, so "no progress" keeps firing for a run that is frozen or gone before its end.
LOOKBACK = "6h"


@dataclass(frozen=True)
class AlertSettings:
    job: str = field(default="vlmgrpo", metadata={
        "help": "The scrape job of the training runs (the `up` series of a target that is gone carries it)."})
    no_progress_minutes: int = field(default=15, metadata={
        "help": "Minutes without a finished optimizer step before a run that has not reached max_steps is called "
                "stuck (a hung collective, a stuck data loader); above the longest step you expect, evaluations "
                "and checkpoint saves included."})
    unhealthy_minutes: int = field(default=2, metadata={
        "help": "Minutes /health must answer 503 (the run's own stall rule, health.py) before the alert."})
    flat_rewards_minutes: int = field(default=10, metadata={
        "help": "Minutes every group's rewards have had zero spread (frac_reward_zero_std 1): advantages and "
                "gradients are zero, so GRPO learns nothing (the trainer's watchdog warns on the same)."})
    gpu_memory_share: float = field(default=0.95, metadata={
        "help": "Share of a GPU's memory in use (NVML) above which an out-of-memory is near."})
    gpu_memory_minutes: int = field(default=5, metadata={
        "help": "Minutes the GPU memory must stay above that share."})
    restarts_per_hour: int = field(default=2, metadata={
        "help": "Worker restarts (torchrun --max-restarts) within an hour that call for a look."})
    target_gone_minutes: int = field(default=5, metadata={
        "help": "Minutes a scrape target of the job must fail before the alert (a node lost, a pod evicted)."})

    def __post_init__(self):
        """A negative minute count or a share outside 0..1 makes a rule that always or never fires: refused."""
        for setting in fields(self):
            value, flag = getattr(self, setting.name), f"--{setting.name.replace('_', '-')}"
            if setting.name.endswith("_minutes") and value < 0:
                raise UserError(f"{flag}: {value} is not a number of minutes; give 0 or more")
            if setting.name.endswith("_share") and not 0 <= value <= 1:
                raise UserError(f"{flag}: {value:g} is not a share of the memory; give a number from 0 to 1 "
                                "(0.95 is 95%)")
        if self.restarts_per_hour < 1:
            raise UserError(f"--restarts-per-hour: {self.restarts_per_hour} would fire with no restart; give 1 or more")


def label_value(text: str) -> str:
    """text as a PromQL double-quoted string's contents: a backslash, a double quote or a newline escaped, so a job
    name stays one label value (`a"}) or vector(1` is matched as that name, not run as PromQL). Escaped rather than
    refused: job names may hold any character (the Prometheus Operator's are namespace/name/index)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _rule(name: str, expr: str, minutes: int, severity: str, summary: str) -> dict:
    rule = {"alert": name, "expr": expr}
    if minutes:
        rule["for"] = f"{minutes}m"
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary}
    return rule


def rules(settings: AlertSettings = AlertSettings()) -> list[dict]:
    """One rule per way a run goes wrong that its metrics show."""
    s = settings
    not_finite = " or ".join(f"({name} != {name}) or (abs({name}) == +Inf)" for name in ("vlmgrpo_loss",
                                                                                           "vlmgrpo_reward"))
    return [
        _rule("VlmgrpoUnhealthy", "vlmgrpo_healthy == 0", s.unhealthy_minutes, "critical",
              "{{ $labels.instance }}: the run's /health answers 503 (no step within its stall limit)"),
        _rule("VlmgrpoNoProgress",
              f"(time() - last_over_time(vlmgrpo_last_step_timestamp_seconds[{LOOKBACK}]) > "
              f"{s.no_progress_minutes * 60}) and on(job, instance) (last_over_time(vlmgrpo_step[{LOOKBACK}]) < "
              f"last_over_time(vlmgrpo_max_steps[{LOOKBACK}]))", 0, "critical",
              f"{{{{ $labels.instance }}}}: no optimizer step finished for over {s.no_progress_minutes} minutes "
              "before the run's last step"),
        _rule("VlmgrpoNotFinite", not_finite, 0, "critical",
              "{{ $labels.instance }}: the loss or the mean reward is NaN or infinite"),
        _rule("VlmgrpoRewardsFlat", "vlmgrpo_frac_reward_zero_std == 1", s.flat_rewards_minutes, "warning",
              "{{ $labels.instance }}: every group's rewards have zero spread, so GRPO is not learning"),
        _rule("VlmgrpoGpuMemoryHigh",
              f"vlmgrpo_gpu_memory_used_bytes / vlmgrpo_gpu_memory_total_bytes > {s.gpu_memory_share:g}",
              s.gpu_memory_minutes, "warning",
              f"{{{{ $labels.instance }}}}: GPU {{{{ $labels.gpu }}}} memory above {s.gpu_memory_share:.0%}"),
        _rule("VlmgrpoRestarting", f"increase(vlmgrpo_restarts_total[1h]) >= {s.restarts_per_hour}", 0, "warning",
              f"{{{{ $labels.instance }}}}: the workers restarted {s.restarts_per_hour} or more times in an hour"),
        _rule("VlmgrpoTargetGone", f'up{{job="{label_value(s.job)}"}} == 0', s.target_gone_minutes, "critical",
              "{{ $labels.instance }}: the run's metrics endpoint does not answer"),
    ]


def rules_file(settings: AlertSettings = AlertSettings()) -> dict:
    return {"groups": [{"name": "vlmgrpo", "rules": rules(settings)}]}


def prometheus_rule(settings: AlertSettings = AlertSettings(), name: str = "vlmgrpo-alerts") -> dict:
    """The same groups as the Prometheus Operator's PrometheusRule (monitoring.coreos.com/v1)."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "vlmgrpo"}},
            "spec": rules_file(settings)}


def setting_names() -> list[str]:
    return [f.name for f in fields(AlertSettings)]
