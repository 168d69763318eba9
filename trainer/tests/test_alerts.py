"""`vlmgrpo alert-rules` and the rules examples/monitoring/ ships: the same rules, valid for Prometheus, and each seen
to fire on series written for it (and stay silent on the others) by `promtool test rules`."""

import shutil
import subprocess

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO
from vlmgrpo.monitoring.alerts import AlertSettings, rules
from vlmgrpo.commands.cli import main

MONITORING = REPO / "examples" / "monitoring"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool on PATH (Debian's `prometheus` package, "
                                                             "which .ci/setup --tests installs)")


def alert_rules(*args: str) -> str:
    result = CliRunner().invoke(main, ["alert-rules", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_shipped_rules_are_the_commands_defaults():
    assert (MONITORING / "vlmgrpo-alerts.yaml").read_text() == alert_rules()
    assert (MONITORING / "vlmgrpo-prometheusrule.yaml").read_text() == alert_rules("--format", "operator")
    operator = yaml.safe_load(alert_rules("--format", "operator"))
    assert (operator["apiVersion"], operator["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert operator["spec"] == yaml.safe_load(alert_rules())


def test_thresholds_are_options():
    changed = yaml.safe_load(alert_rules("--no-progress-minutes", "30", "--job", "grpo", "--gpu-memory-share", "0.9"))
    by_name = {rule["alert"]: rule for rule in changed["groups"][0]["rules"]}
    assert "> 1800)" in by_name["VlmgrpoNoProgress"]["expr"]
    assert by_name["VlmgrpoTargetGone"]["expr"] == 'up{job="grpo"} == 0'
    assert by_name["VlmgrpoGpuMemoryHigh"]["expr"].endswith("> 0.9")
    assert {rule["alert"] for rule in rules(AlertSettings())} == set(by_name)
    wrong = CliRunner().invoke(main, ["alert-rules", "--no-progress-minutes", "soon"])
    assert wrong.exit_code == 2 and "'soon' is not a valid integer" in wrong.output


@needs_promtool
def test_promtool_takes_both_files_and_every_rule_fires_where_it_should(tmp_path):
    spec = tmp_path / "operator-spec.yaml"
    spec.write_text(yaml.safe_dump(yaml.safe_load((MONITORING / "vlmgrpo-prometheusrule.yaml").read_text())["spec"]))
    for path in (MONITORING / "vlmgrpo-alerts.yaml", spec):
        checked = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0 and "SUCCESS: 7 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([PROMTOOL, "test", "rules", "vlmgrpo-alerts.test.yaml"], cwd=MONITORING,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tests = yaml.safe_load((MONITORING / "vlmgrpo-alerts.test.yaml").read_text())["tests"][0]["alert_rule_test"]
    assert {case["alertname"] for case in tests if case["exp_alerts"]} == {rule["alert"] for rule in rules()}


@pytest.mark.parametrize("args, said", [
    (["--no-progress-minutes", "-5"], "error: --no-progress-minutes: -5 is not a number of minutes; give 0 or more"),
    (["--target-gone-minutes", "-1"], "error: --target-gone-minutes: -1 is not a number of minutes; give 0 or more"),
    (["--gpu-memory-share", "7"], "error: --gpu-memory-share: 7 is not a share of the memory; give a number from 0 "
                                  "to 1 (0.95 is 95%)"),
    (["--gpu-memory-share", "-0.1"], "error: --gpu-memory-share: -0.1 is not a share of the memory"),
    (["--restarts-per-hour", "0"], "error: --restarts-per-hour: 0 would fire with no restart; give 1 or more"),
])
def test_a_threshold_that_cannot_mean_anything_is_one_line_and_exit_2(args, said):
    result = CliRunner().invoke(main, ["alert-rules", *args])
    assert result.exit_code == 2 and result.output.strip().startswith(said)
    assert len(result.output.strip().splitlines()) == 1


def test_the_job_is_one_label_value_whatever_it_holds():
    """`--job 'a"}) or vector(1'` made the rule fire always (PromQL injection); escaped, it is a name that no target
    has, and PromQL reads the string back as the name given."""
    import json

    for job in ('a"}) or vector(1', "back\\slash", "monitoring/vlmgrpo/0"):
        by_name = {rule["alert"]: rule for rule in yaml.safe_load(alert_rules("--job", job))["groups"][0]["rules"]}
        expr = by_name["VlmgrpoTargetGone"]["expr"]
        assert expr.startswith("up{job=") and expr.endswith("} == 0")
        # PromQL's double-quoted strings escape as Go's (and JSON's, for these characters): one string, the job
        assert json.loads(expr[len("up{job="):-len("} == 0")]) == job
