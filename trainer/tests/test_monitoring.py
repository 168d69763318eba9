"""A training run's /metrics scraped by a real Prometheus server (Debian's `prometheus`, which .ci/setup --tests
installs), its /health failing on a stalled step and recovering, and the shipped alert rules firing through a real
Alertmanager when the run freezes; all on loopback, with the tiny model."""

import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import ENV, TESTS, read_jsonl

pytestmark = pytest.mark.slow

PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def quick_train(tiny, output, port, steps, hold_after, release, settings=()):
    """A run of STEPS tiny steps serving metrics on loopback, whose step HOLD_AFTER + 1 waits for the file RELEASE
    (holding.py; HOLD_AFTER and RELEASE may be equally long lists: one hold per step); the Popen."""
    hold_after = hold_after if isinstance(hold_after, (list, tuple)) else [hold_after]
    release = release if isinstance(release, (list, tuple)) else [release]
    command = [sys.executable, "-m", "vlmgrpo", "train", "--model", tiny["model"], "--data", tiny["data"],
               "--image-root", tiny["image_root"], "--output", str(output), "--num-generations", "2",
               "--batch-size", "2", "--max-completion-length", "4", "--max-steps", str(steps), "--save-steps", "1000",
               "--metrics-port", str(port), "--set", "metrics_host=127.0.0.1", "--set", "report_to=none",
               "--set", "gradient_accumulation_steps=1", "--set", "gradient_checkpointing=false",
               "--set", f"reward_funcs=[{TESTS / 'shaping.py'}:token_sum, {TESTS / 'holding.py'}:held]",
               *[item for key, value in dict(settings).items() for item in ("--set", f"{key}={value}")]]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(ENV, VLMGRPO_TEST_HOLD_AFTER=",".join(map(str, hold_after)),
                                     VLMGRPO_TEST_RELEASE=os.pathsep.join(map(str, release))))


def get(url: str) -> tuple[int, str]:
    """(status, body); 0 when nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


def finish(run, timeout=120) -> str:
    output, _ = run.communicate(timeout=timeout)
    assert run.returncode == 0, output[-4000:]
    return output


def test_health_fails_on_a_stalled_step_and_recovers(tiny, tmp_path):
    """Step 4 waits until the test has seen /health answer 503 three times (the limit: max(2 x the median step time,
    2 s)), then goes on; /health answers 200 again once it finishes. Step 5 waits until the test has seen that 200,
    so the run cannot finish and exit between two probes."""
    port, release, recovered = free_port(), tmp_path / "release", tmp_path / "recovered"
    run = quick_train(tiny, tmp_path / "run", port, steps=5, hold_after=[3, 4], release=[release, recovered],
                      settings={"health_stall_factor": 2, "health_stall_min_s": 2, "health_startup_s": 60})
    seen, released = [], None  # (status, reason) as a probe sees them, every 0.2 s
    while run.poll() is None:
        status, body = get(f"http://127.0.0.1:{port}/health")
        if status:
            seen.append((status, body.strip()))
        if released is None and [status for status, _ in seen].count(503) >= 3:
            release.touch()
            released = len(seen)
        if released is not None and status == 200:
            recovered.touch()
        time.sleep(0.2)
    finish(run)
    assert released is not None, seen
    stalled = [reason for status, reason in seen[:released] if status == 503]
    assert stalled[-1].startswith("stalled: no step finished for ") and " after step 3 (limit " in stalled[-1], seen
    assert "health_stall_factor 2 x median step time" in stalled[-1] and "at least health_stall_min_s 2)" in stalled[-1]
    assert any(reason.startswith("ok: step ") for status, reason in seen[:released] if status == 200), seen
    after = [(status, reason) for status, reason in seen[released:] if not reason.startswith("stalled")]
    assert after and after[0][0] == 200 and after[0][1].startswith("ok: step 4,"), seen


def query(base: str, promql: str) -> list:
    status, body = get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def start_prometheus(tmp_path, target_port: int, more: str = ""):
    """A real Prometheus scraping the target every second (and evaluating MORE's rules every second)."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n"
                      f"scrape_configs:\n  - job_name: vlmgrpo\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{target_port}']\n" + more)
    server = ready_daemon([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"], port)
    return server, f"http://127.0.0.1:{port}"


def ready_daemon(command: list[str], port: int) -> subprocess.Popen:
    """Prometheus or Alertmanager listening on 127.0.0.1:PORT, once its /-/ready answers 200."""
    server = subprocess.Popen([*command, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while get(f"http://127.0.0.1:{port}/-/ready")[0] != 200:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"{command[0]} did not start: {server.communicate()[1][-2000:]}")
        time.sleep(0.2)
    return server


@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary on PATH (Debian's `prometheus` package; "
                    "bash .ci/setup --tests installs it)")
def test_a_real_prometheus_scrapes_the_step(tiny, tmp_path):
    """Prometheus scrapes the run every second while step 3 waits; it answers the query for the step metric with 2."""
    target, release = free_port(), tmp_path / "release"
    server, base = start_prometheus(tmp_path, target)
    try:
        run = quick_train(tiny, tmp_path / "run", target, steps=4, hold_after=2, release=release)
        deadline, scraped = time.monotonic() + 120, []
        while run.poll() is None and not scraped and time.monotonic() < deadline:
            scraped = [result for result in query(base, "vlmgrpo_step") if result["value"][1] == "2"]
            time.sleep(0.3)
        rewards = query(base, 'vlmgrpo_reward_function{reward="token_sum"}')
        healthy, info = query(base, "vlmgrpo_healthy"), query(base, "vlmgrpo_info")
        release.touch()
        output = finish(run)
        assert scraped, f"prometheus never answered vlmgrpo_step 2\n{output[-3000:]}"
        assert scraped[0]["metric"] == {"__name__": "vlmgrpo_step", "job": "vlmgrpo", "instance": f"127.0.0.1:{target}"}
        assert [record["step"] for record in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3, 4]
        assert len(rewards) == 1 and 0 <= float(rewards[0]["value"][1]) <= 1
        assert healthy[0]["value"][1] == "1" and info[0]["metric"]["command"] == "train"
    finally:
        release.touch()
        server.terminate()
        server.wait(timeout=30)


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class _Webhook(http.server.BaseHTTPRequestHandler):
    received: list = []  # (alertname, status) of each alert in each notification

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _Webhook.received += [(alert["labels"]["alertname"], alert["status"]) for alert in body["alerts"]]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def start_alertmanager(tmp_path, webhook_port: int):
    """A real Alertmanager sending every group at once, and its resolution, to the webhook on loopback."""
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text("route: {receiver: hook, group_wait: 1s, group_interval: 1s, repeat_interval: 1h}\n"
                      f"receivers:\n  - name: hook\n    webhook_configs:\n"
                      f"      - {{url: 'http://127.0.0.1:{webhook_port}/', send_resolved: true}}\n")
    server = ready_daemon([ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am'}",
                           "--cluster.listen-address="], port)
    return server, port


def wait_for(condition, seconds: float, what: str, run) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            run.kill()
            pytest.fail(f"{what} within {seconds} s; the webhook got {_Webhook.received}\n{run.communicate()[0][-3000:]}")
        time.sleep(0.5)


@pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None, reason="no prometheus or alertmanager binary on PATH "
                    "(Debian's `prometheus` and `prometheus-alertmanager`; bash .ci/setup --tests installs them)")
def test_a_frozen_run_fires_no_progress_through_alertmanager_and_resolves_when_it_goes_on(tiny, tmp_path):
    """The shipped rules with a 1-minute no-progress limit, a real Prometheus scraping a live tiny run every second
    and a real Alertmanager: SIGSTOP freezes the run (its scrapes fail, its series go stale), VlmgrpoNoProgress
    reaches the webhook; SIGCONT, the next step finishes and the webhook gets it resolved."""
    import psutil
    from click.testing import CliRunner

    from vlmgrpo.commands.cli import main

    _Webhook.received = []
    hook = http.server.HTTPServer(("127.0.0.1", 0), _Webhook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    rules = tmp_path / "rules.yaml"
    rules.write_text(CliRunner().invoke(main, ["alert-rules", "--no-progress-minutes", "1"]).output)
    alertmanager, am_port = start_alertmanager(tmp_path, hook.server_port)
    target = free_port()
    server, base = start_prometheus(tmp_path, target, f"rule_files: ['{rules}']\nalerting:\n  alertmanagers:\n"
                                    f"    - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]\n")
    run = quick_train(tiny, tmp_path / "run", target, steps=100000, hold_after=10 ** 9, release=tmp_path / "never")
    frozen = [psutil.Process(run.pid), *psutil.Process(run.pid).children(recursive=True)]
    try:
        wait_for(lambda: any(float(r["value"][1]) >= 2 for r in query(base, "vlmgrpo_step")), 180,
                 "Prometheus did not see step 2", run)
        for process in frozen:
            process.suspend()  # SIGSTOP
        stopped = time.monotonic()
        wait_for(lambda: ("VlmgrpoNoProgress", "firing") in _Webhook.received, 120, "no firing alert", run)
        assert time.monotonic() - stopped >= 55  # not before the 1-minute limit
        for process in frozen:
            process.resume()  # SIGCONT
        wait_for(lambda: ("VlmgrpoNoProgress", "resolved") in _Webhook.received, 60, "no resolution", run)
        assert {name for name, _ in _Webhook.received} == {"VlmgrpoNoProgress"}  # nothing else fired
    finally:
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.resume()
        run.kill()
        run.wait(timeout=60)
        for daemon in (server, alertmanager):
            daemon.terminate()
            daemon.wait(timeout=30)
        hook.shutdown()
