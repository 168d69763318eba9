"""The /health verdict from step times (health.py), the Prometheus exposition and the HTTP server (exporter.py), the
config keys; fast, no training. The runs with a real Prometheus and a stalling reward are in test_monitoring.py."""

import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import in_process
from vlmgrpo.errors import ConfigError
from vlmgrpo.monitoring.exporter import build_registry, make_app, start_monitor
from vlmgrpo.commands.grpo import GRPO_METRICS
from vlmgrpo.monitoring.health import StallPolicy, StepClock

POLICY = StallPolicy(factor=3, min_s=5, startup_s=100)


def test_healthy_during_the_startup_grace_then_unhealthy():
    clock = StepClock(POLICY, now=1000)
    assert clock.verdict(1050).healthy
    assert "starting: no step finished yet" in clock.verdict(1050).reason
    late = clock.verdict(1101)
    assert (late.healthy, late.status) == (False, 503)
    assert late.reason == "stalled: no step finished in 101 s since the start (health_startup_s 100)"
    clock.step_finished(1, duration=90, now=1102)  # a step finishing at last recovers it
    assert clock.verdict(1103).healthy


def test_a_stall_is_a_multiple_of_the_median_step_time_and_recovers():
    clock = StepClock(POLICY, now=0)
    for step, duration in enumerate([4, 4, 100, 4, 4], start=1):  # one slow step barely moves the median
        clock.step_finished(step, duration, now=step * 10)
    assert clock.median() == 4 and clock.limit() == 12
    assert clock.verdict(50 + 12).healthy
    stalled = clock.verdict(50 + 12.5)
    assert stalled.status == 503
    assert stalled.reason.startswith("stalled: no step finished for 12.5 s after step 5 (limit 12 s: "
                                     "health_stall_factor 3 x median step time 4 s, at least health_stall_min_s 5)")
    clock.step_finished(6, duration=20, now=70)
    assert clock.verdict(71).healthy and "ok: step 6" in clock.verdict(71).reason


def test_the_floor_holds_for_fast_steps():
    clock = StepClock(POLICY, now=0)
    clock.step_finished(1, duration=0.1, now=1)  # 3 x 0.1 s would call a 0.4 s pause a stall
    assert clock.limit() == 5
    assert clock.verdict(5.9).healthy and not clock.verdict(6.1).healthy


def test_saves_and_evaluation_batches_count_as_progress_but_not_as_step_times():
    clock = StepClock(POLICY, now=0)
    clock.progress(1)  # before the first step: still the startup grace
    assert clock.last_progress is None
    clock.step_finished(1, duration=2, now=10)
    for now in (14, 18, 22):  # a checkpoint, then evaluation batches
        clock.progress(now)
    assert clock.verdict(27.5).healthy and list(clock.durations) == [2]
    assert not clock.verdict(28.5).healthy  # 22 + 3 x 2 s


def test_finished_training_stays_healthy_while_the_model_is_saved():
    clock = StepClock(POLICY, now=0)
    clock.step_finished(3, duration=1, now=3)
    clock.finish()
    assert clock.verdict(10_000).reason == "ok: training finished at step 3"


def test_the_median_follows_recent_steps():
    clock = StepClock(POLICY, now=0)
    for step in range(300):
        clock.step_finished(step, duration=1 if step < 150 else 9, now=step)
    assert clock.median() == 9


def scrape(registry) -> dict:
    """(name, labels) -> value, through the exposition text a scraper parses."""
    from prometheus_client import generate_latest

    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_gauges_appear_with_their_first_value(monkeypatch):
    import time

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    clock = StepClock(POLICY, now=time.monotonic() - 1000)  # started 1000 s ago: past the 100 s startup grace
    registry, metrics = build_registry(clock, GRPO_METRICS, samples_per_step=16, labels={"command": "train"})
    before = scrape(registry)
    assert ("vlmgrpo_loss", ()) not in before and ("vlmgrpo_step", ()) not in before
    assert before[("vlmgrpo_restarts_total", ())] == 2
    assert before[("vlmgrpo_info", (("command", "train"),))] == 1
    metrics.step_finished(4, duration=2.0, median=2.5)
    metrics.logged({"loss": 0.5, "kl": 0.01, "reward": 1.5, "completions/mean_length": 12, "num_tokens": 1000,
                    "rewards/iou/mean": 0.75, "rewards/format/mean": 0.75, "rewards/iou/std": 0.1}, now=10)
    metrics.logged({"loss": 0.4, "num_tokens": 1600}, now=13)
    metrics.logged({"eval_loss": 0.3, "eval_rewards/rec_accuracy/mean": 0.5}, now=14)
    after = scrape(registry)
    assert after[("vlmgrpo_step", ())] == 4 and after[("vlmgrpo_step_time_seconds", ())] == 2
    assert after[("vlmgrpo_samples_per_second", ())] == 8
    assert after[("vlmgrpo_loss", ())] == 0.4 and after[("vlmgrpo_kl", ())] == 0.01
    assert after[("vlmgrpo_completion_length", ())] == 12
    assert after[("vlmgrpo_reward_function", (("reward", "iou"),))] == 0.75
    assert ("vlmgrpo_reward_function", (("reward", "iou/std"),)) not in after
    assert after[("vlmgrpo_tokens_per_second", ())] == 200
    assert after[("vlmgrpo_eval_loss", ())] == 0.3
    assert after[("vlmgrpo_eval_reward_function", (("reward", "rec_accuracy"),))] == 0.5
    assert after[("vlmgrpo_healthy", ())] == 0  # the metrics got no step; the clock none either
    assert ("process_resident_memory_bytes", ()) in after


def call(app, path: str) -> tuple[str, str]:
    answer = {}

    def start_response(status, headers):
        answer["status"] = status

    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""}, start_response))
    return answer["status"], body.decode()


def test_the_app_answers_metrics_health_and_404():
    import time

    clock = StepClock(POLICY, now=time.monotonic())
    registry, _ = build_registry(clock, GRPO_METRICS, samples_per_step=1, labels={})
    app = make_app(registry, clock)
    status, body = call(app, "/health")
    assert status == "200 OK" and body.startswith("starting: ") and body.count("\n") == 1
    clock.step_finished(1, duration=1, now=time.monotonic() - 60)
    status, body = call(app, "/health")
    assert status == "503 Service Unavailable" and body.startswith("stalled: no step finished for ")
    status, body = call(app, "/metrics")
    assert status.startswith("200") and "vlmgrpo_healthy 0.0" in body
    assert call(app, "/other")[0].startswith("404")


def run_config(**values):
    defaults = {"metrics_host": "127.0.0.1", "metrics_port": 0, "health_stall_factor": 10.0,
                "health_stall_min_s": 300.0, "health_startup_s": 1800.0}
    return SimpleNamespace(**{**defaults, **values})


def test_the_server_serves_both_paths_on_one_port_and_refuses_a_taken_port():
    monitor = start_monitor(run_config(), GRPO_METRICS, 1, {"command": "train"})
    try:
        base = f"http://127.0.0.1:{monitor.port}"
        assert urllib.request.urlopen(f"{base}/health", timeout=5).status == 200
        assert b"vlmgrpo_info" in urllib.request.urlopen(f"{base}/metrics", timeout=5).read()
        with pytest.raises(ConfigError, match=f"key 'metrics_port': cannot serve metrics on 127.0.0.1:{monitor.port}"):
            start_monitor(run_config(metrics_port=monitor.port), GRPO_METRICS, 1, {})
    finally:
        monitor.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{base}/health", timeout=5)


def test_the_keys_and_the_flag():
    shown = in_process("train", "--metrics-port", "9400", "--set", "health_stall_factor=2",
                       "--print-config", check=True).stdout
    assert "\nmetrics_port: 9400\n" in shown and "\nhealth_stall_factor: 2\n" in shown
    assert "# Serve Prometheus metrics on GET /metrics" in shown
    assert "\nmetrics_port: null\n" in in_process("sft", "--print-config", check=True).stdout
    for value, problem in (("70000", "must be >= 1 and <= 65535 (a TCP port), got 70000"),
                           ("0", "must be >= 1 and <= 65535 (a TCP port), got 0")):
        refused = in_process("train", "--metrics-port", value, "--print-config")
        assert refused.returncode == 2 and f"key 'metrics_port': {problem}" in refused.stderr
    refused = in_process("train", "--set", "health_stall_factor=0", "--print-config")
    assert "key 'health_stall_factor': must be > 0" in refused.stderr
