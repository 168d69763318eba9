"""Prometheus metrics and the /health endpoint of a training run, served by rank 0 on `metrics_port`.

One HTTP server (wsgiref, a thread per request) answers GET /metrics (prometheus_client's exposition of the
registry below) and GET /health (200 or 503 with one line: health.StepClock's verdict). The numbers come from
callbacks.MonitorCallback; GPU figures and the health gauges are read when Prometheus scrapes. No transformers
import: the CLI starts the server before the model loads, so /health answers during the startup grace."""

from __future__ import annotations

import logging
import os
import threading
import time
from socketserver import ThreadingMixIn
from typing import Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (CollectorRegistry, Counter, GCCollector, Info, PlatformCollector, ProcessCollector,
                               make_wsgi_app)
from prometheus_client.core import GaugeMetricFamily

from vlmgrpo.errors import ConfigError
from vlmgrpo.monitoring.health import StallPolicy, StepClock
from vlmgrpo.monitoring.metrics import MetricsView

log = logging.getLogger("vlmgrpo")

PREFIX = "vlmgrpo"


# The gauges besides the command's metrics.jsonl numbers (whose help is generic), by name after the prefix.
HELP = {
    "reward_function": "The last logged mean reward of one reward function (label reward: its name).",
    "eval_reward_function": "The last evaluation's mean reward of one reward function (label reward: its name).",
    "step": "The last finished optimizer step.",
    "max_steps": "The optimizer steps the run will take.",
    "step_time_seconds": "Wall time of the last optimizer step.",
    "step_time_median_seconds": "Median of the recent step times (the base of /health's stall limit).",
    "last_step_timestamp_seconds": "Unix time the last optimizer step finished.",
    "samples_per_second": "Samples (completions for train, rows for sft) per second in the last step, all "
                          "processes together.",
    "tokens_per_second": "Tokens the trainer counted (its num_tokens) per second between the last two logged steps.",
    "checkpoint_step": "Step of the newest checkpoint written (or found in the output directory at the start).",
}


class RunMetrics:
    """The run's gauges, each exposed from its first value on (no 0 for a loss not logged yet): one per number of the
    command's metrics.jsonl (vlmgrpo_loss, vlmgrpo_kl, ...), the rewards by function, step times and throughput,
    the newest checkpoint; and the restarts counter."""

    def __init__(self, view: MetricsView, samples_per_step: int, restarts: Counter):
        self.samples_per_step = samples_per_step
        self.restarts = restarts
        self.train_keys = dict(view.keys)  # log key -> metrics.jsonl name
        self.eval_keys = {key: key for key in view.eval_keys}
        self._values: dict[tuple[str, Optional[str]], float] = {}  # (name, reward label) -> value
        self._lock = threading.Lock()
        self._tokens_seen: Optional[tuple[float, float]] = None  # (num_tokens, time) at the last log that had it

    def set(self, name: str, value: float, reward: Optional[str] = None) -> None:
        with self._lock:
            self._values[(name, reward)] = float(value)

    def value(self, name: str, reward: Optional[str] = None) -> Optional[float]:
        return self._values.get((name, reward))

    def collect(self):
        with self._lock:
            values = sorted(self._values.items(), key=lambda item: (item[0][0], item[0][1] or ""))
        families: dict[str, GaugeMetricFamily] = {}
        for (name, reward), value in values:
            if name not in families:
                text = HELP.get(name, f"The last logged {name} (as in metrics.jsonl).")
                families[name] = GaugeMetricFamily(f"{PREFIX}_{name}", text,
                                                   labels=["reward"] if reward is not None else None)
            families[name].add_metric([reward] if reward is not None else [], value)
        yield from families.values()

    def describe(self):
        return []

    def step_finished(self, step: int, duration: float, median: Optional[float]) -> None:
        self.set("step", step)
        self.set("step_time_seconds", duration)
        self.set("last_step_timestamp_seconds", time.time())
        if median is not None:
            self.set("step_time_median_seconds", median)
        if duration > 0:
            self.set("samples_per_second", self.samples_per_step / duration)

    def logged(self, logs: dict, now: float) -> None:
        """A Trainer log: training numbers under their metrics.jsonl names, or an evaluation's."""
        evaluation = "eval_loss" in logs
        for key, name in (self.eval_keys if evaluation else self.train_keys).items():
            if is_number(logs.get(key)):
                self.set(name, logs[key])
        prefix, family = ("eval_rewards", "eval_reward_function") if evaluation else ("rewards", "reward_function")
        for key, value in logs.items():
            if key.startswith(f"{prefix}/") and key.endswith("/mean") and is_number(value):
                self.set(family, value, reward=key.split("/")[1])
        if is_number(logs.get("num_tokens")):
            self._count_tokens(float(logs["num_tokens"]), now)

    def _count_tokens(self, seen: float, now: float) -> None:
        if self._tokens_seen is not None and now > self._tokens_seen[1] and seen >= self._tokens_seen[0]:
            self.set("tokens_per_second", (seen - self._tokens_seen[0]) / (now - self._tokens_seen[1]))
        self._tokens_seen = (seen, now)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class ScrapeTimeCollector:
    """What is read when Prometheus scrapes: the health verdict, and GPU memory (torch, this process's device) and
    utilization (pynvml, every GPU, only where it is installed) where there are GPUs."""

    def __init__(self, clock: StepClock):
        self.clock = clock
        self.nvml = nvml_handles()

    def describe(self):
        return []  # no fixed set of families: nothing to check at registration

    def collect(self):
        now = time.monotonic()
        verdict = self.clock.verdict(now)
        yield GaugeMetricFamily(f"{PREFIX}_healthy", "1 while /health answers 200, 0 while it answers 503.",
                                value=1 if verdict.healthy else 0)
        since = now - (self.clock.last_progress if self.clock.last_progress is not None else self.clock.started)
        yield GaugeMetricFamily(f"{PREFIX}_seconds_since_progress", "Seconds since the last finished step, save or "
                                "evaluation batch (since the start before the first step).", value=since)
        yield from torch_memory()
        yield from nvml_figures(self.nvml)


def torch_memory():
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    device = torch.cuda.current_device()
    for name, value, text in (("allocated", torch.cuda.memory_allocated(device), "held by tensors"),
                              ("reserved", torch.cuda.memory_reserved(device), "reserved by torch's allocator")):
        family = GaugeMetricFamily(f"{PREFIX}_gpu_memory_{name}_bytes", f"GPU memory {text} in the rank-0 "
                                   "process, on its device.", labels=["gpu"])
        family.add_metric([str(device)], value)
        yield family


def nvml_handles() -> list:
    """pynvml's device handles where pynvml imports and a driver answers; [] otherwise (it is not a dependency)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - not installed, no driver, no GPU: the figures are left out
        return []


def nvml_figures(handles: list):
    if not handles:
        return
    import pynvml

    utilization = GaugeMetricFamily(f"{PREFIX}_gpu_utilization_percent", "Percent of the last sample period a "
                                    "kernel ran on the GPU (NVML, as nvidia-smi shows).", labels=["gpu"])
    used = GaugeMetricFamily(f"{PREFIX}_gpu_memory_used_bytes", "GPU memory used by every process (NVML).",
                             labels=["gpu"])
    total = GaugeMetricFamily(f"{PREFIX}_gpu_memory_total_bytes", "GPU memory in all (NVML).", labels=["gpu"])
    for index, handle in enumerate(handles):
        try:
            utilization.add_metric([str(index)], pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            used.add_metric([str(index)], memory.used)
            total.add_metric([str(index)], memory.total)
        except Exception:  # noqa: BLE001 - a GPU fallen off the bus is not the exporter's failure
            continue
    yield utilization
    yield used
    yield total


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - no access log on the training output
        pass


def make_app(registry: CollectorRegistry, clock: StepClock):
    """/metrics: the exposition; /health: 200 or 503 with the verdict's line; anything else 404."""
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if path == "/health":
            verdict = clock.verdict(time.monotonic())
            status = "200 OK" if verdict.healthy else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [(verdict.reason + "\n").encode()]
        if path == "/metrics":
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: GET /metrics or /health\n"]

    return app


class Monitor:
    """The run's clock, metrics and HTTP server; `stop()` closes the server."""

    def __init__(self, clock: StepClock, metrics: RunMetrics, server: WSGIServer):
        self.clock, self.metrics, self.server = clock, metrics, server
        self.thread = threading.Thread(target=server.serve_forever, name="vlmgrpo-metrics", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def build_registry(clock: StepClock, view: MetricsView, samples_per_step: int,
                   labels: dict[str, str]) -> tuple[CollectorRegistry, RunMetrics]:
    """A registry of its own (the process's figures, the run's metrics, the health gauges) and the run's metrics."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)
    restarts = Counter(f"{PREFIX}_restarts", "Times the workers were restarted (torchrun's TORCHELASTIC_RESTART_COUNT "
                       "at the start, then each restart).", registry=registry)
    restarts.inc(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0))
    metrics = RunMetrics(view, samples_per_step, restarts)
    registry.register(metrics)
    Info(PREFIX, "The run: its command and vlmgrpo's version.", registry=registry).info(labels)
    registry.register(ScrapeTimeCollector(clock))
    return registry, metrics


def start_monitor(run, view: MetricsView, samples_per_step: int, labels: dict[str, str]) -> Monitor:
    """Serve /metrics and /health on run.metrics_host:run.metrics_port (a RunConfig's); ConfigError when the port
    is taken. The startup grace counts from here."""
    clock = StepClock(StallPolicy(run.health_stall_factor, run.health_stall_min_s, run.health_startup_s),
                      time.monotonic())
    registry, metrics = build_registry(clock, view, samples_per_step, labels)
    try:
        server = make_server(run.metrics_host, run.metrics_port, make_app(registry, clock), _ThreadingServer,
                             handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(f"key 'metrics_port': cannot serve metrics on {run.metrics_host}:{run.metrics_port}: "
                          f"{exc.strerror or exc}; choose another port") from None
    monitor = Monitor(clock, metrics, server)
    log.info("serving Prometheus metrics on http://%s:%d/metrics and the run's health on /health",
             run.metrics_host, monitor.port)
    return monitor
