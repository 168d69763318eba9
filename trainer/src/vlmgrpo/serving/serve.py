"""`vlmgrpo serve`: an OpenAI-compatible chat-completions endpoint (image inputs included) for a trained model.

The field's servers do the serving: vLLM's OpenAI server where the image has vLLM and a GPU, `transformers serve`
elsewhere (the CPU path the tests run). Each listens on a Unix socket in a directory only this uid may enter, never
on a TCP port: on loopback any local user or a pod's sidecar reached it past every check of the front (issue 53).
A thin layer in front (app.py) answers the
mistakes they turn into 500s or silently accept with a 4xx that says what is wrong: a body that is not JSON, an image
that does not decode, a model name this server does not serve. Signals: SIGTERM (or Ctrl-C) answers new requests
503, lets those in flight finish within --shutdown-grace, refuses those still running then, logs which (drain.py),
then stops the engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from vlmgrpo.errors import ConfigError, LaunchError
from vlmgrpo.models.attention import choose_attention
from vlmgrpo.models.source import MODEL, check_source, cuda_available
from vlmgrpo.processes import stop_process, wait_for_health
from vlmgrpo.training.rollouts import VLLM_IMAGES
from vlmgrpo.serving import offload
from vlmgrpo.serving.drain import REFUSE_S, SHUTDOWN_GRACE_S, Drain
from vlmgrpo.serving.requests import API_KEY_VARIABLE, Limits
from vlmgrpo.serving.fit import processor_target
from vlmgrpo.serving.tokens import model_processor, prompt_tokens, special_tokens

log = logging.getLogger("vlmgrpo")
ENGINES = ("auto", "vllm", "transformers")
READY_TIMEOUT_S = 900  # a 7B model read from network storage takes minutes
ENGINE_STOP_S = 5.0  # the engine's time to exit on SIGTERM once no request waits for it (Engine.stop)
ENGINE_HEALTH = "http://engine/health"  # asked on the engine's socket: the host is a placeholder


HOST_VARIABLE = "VLMGRPO_SERVE_HOST"  # the images set it to 0.0.0.0: a container's loopback is its own
MEDIA_FLAGS = ("--allowed-media-domains", "--allowed-local-media-path")  # the engine's: the front decides instead
LISTEN_FLAGS = ("--host", "--port", "--uds")  # where the engine listens: its private socket, nowhere else
NO_MEDIA_DOMAIN = "no-url-is-fetched-by-the-engine.invalid"  # .invalid never resolves (RFC 6761)


@dataclass
class ServeSettings:
    """What `vlmgrpo serve` serves, and how. The help of a field with one is its option's (imagegen_contract.options)."""
    model: str = field(metadata={"help": "Model directory (a run's OUTPUT or OUTPUT/merged) or hub name.",
                                 "required": True})
    # what clients put in "model" (default: --model as given, as vLLM does)
    served_name: str = field(metadata={
        "help": "The name clients put in \"model\" (default: --model as given).", "flag": "--served-model-name"})
    host: str = field(default="127.0.0.1", metadata={
        "help": f"Where to listen (or {HOST_VARIABLE}, which the images set to 0.0.0.0: set an API key there).",
        "envvar": HOST_VARIABLE})
    port: int = field(default=8000, metadata={"help": "The port to listen on."})
    engine: str = field(default="auto", metadata={
        "help": "auto: vLLM where it is installed and a GPU is visible, else transformers serve.", "choices": ENGINES})
    dtype: str = field(default="auto", metadata={"help": "Weights' dtype for the engine."})
    engine_args: list[str] = field(default_factory=list)  # passed through to the engine as given
    limits: Limits = field(default_factory=Limits)  # who may ask, and for how much
    shutdown_grace_s: float = field(default=SHUTDOWN_GRACE_S, metadata={
        "help": "Seconds the requests in flight at SIGTERM get to finish (new ones are answered 503); those still "
                "running then are refused with a 503. The default fits Kubernetes' 30 s before it kills a pod; give "
                "`docker stop` more than this (its default is 10 s: `docker stop -t 35`).",
        "flag": "--shutdown-grace", "min": 0})


def choose_engine(requested: str, vllm_installed: bool, gpu: bool) -> str:
    if requested == "vllm" and not vllm_installed:
        raise ConfigError(f"--engine vllm: vLLM is not installed in this image; {VLLM_IMAGES}; or use --engine "
                          "transformers")
    if requested == "vllm" and not gpu:
        raise ConfigError("--engine vllm: no GPU is visible (vLLM serves on GPUs); run with --gpus, or use "
                          "--engine transformers")
    if requested != "auto":
        return requested
    return "vllm" if vllm_installed and gpu else "transformers"


def _script(name: str) -> str:
    """The console script installed beside this interpreter (the image's venv), else the one on PATH."""
    sibling = Path(sys.executable).with_name(name)
    return str(sibling) if sibling.exists() else (shutil.which(name) or name)


def _flag(arg: str) -> str:
    """An engine argument's flag in its dashed spelling: vLLM reads `--allowed_local_media_path` as
    `--allowed-local-media-path`."""
    name = arg.split("=")[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def engine_command(settings: ServeSettings, engine: str, socket_path: str) -> list[str]:
    """The engine's own server on a Unix socket (engine_socket); the layer in front owns the public port. vLLM is
    given a media allow-list no URL matches: every image reaches it inline, checked (without one it fetches any URL
    it is given; with --allowed-local-media-path it opens files, which it is never given)."""
    for arg in settings.engine_args:
        if _flag(arg) in MEDIA_FLAGS:
            raise ConfigError(f"{arg.split('=')[0]} is not passed to the engine: images reach it inline from the "
                              "layer in front, which fetches the hosts of vlmgrpo serve's own --allowed-media-domains")
        if _flag(arg) in LISTEN_FLAGS:
            raise ConfigError(f"{arg.split('=')[0]} is not passed to the engine: it listens on a private socket that "
                              "only the layer in front reaches; vlmgrpo serve's own --host and --port say where "
                              "clients connect")
    if engine == "vllm":
        return [_script("vllm"), "serve", settings.model, "--uds", socket_path,
                "--served-model-name", settings.served_name, "--dtype", settings.dtype,
                "--allowed-media-domains", NO_MEDIA_DOMAIN, *settings.engine_args]
    attention = []  # the kernel `train` would load the model with, unless the operator passed one through
    if not any(arg.startswith(("--attn-implementation", "--attn_implementation")) for arg in settings.engine_args):
        attention = ["--attn-implementation", choose_attention("auto")]
    return [sys.executable, "-m", "vlmgrpo.serving.on_socket", socket_path, "serve", settings.model,
            "--dtype", settings.dtype, *attention, *settings.engine_args]


def engine_socket() -> str:
    """A path for the engine's socket in a new directory that only this uid may enter (0700): the socket itself is
    left writable by anyone (uvicorn makes it 0666). A TMPDIR too long for a socket's path (108 bytes) gives way to
    /tmp."""
    directory = tempfile.mkdtemp(prefix="vlmgrpo-engine-")
    if len(os.path.join(directory, "engine.sock").encode()) > 100:
        os.rmdir(directory)
        directory = tempfile.mkdtemp(prefix="vlmgrpo-engine-", dir="/tmp")
    return os.path.join(directory, "engine.sock")


def engine_model_id(settings: ServeSettings, engine: str) -> str:
    """The name the engine itself answers to: vLLM takes --served-model-name; transformers serve the model path."""
    return settings.served_name if engine == "vllm" else settings.model


def check_model(model: str) -> None:
    """As `train` checks its model: a directory with config.json whose files this uid can read (weights saved 0600
    by another user are otherwise a "file not found" from the engine, after it started), or a hub id."""
    if os.path.isdir(model) and not os.path.isfile(os.path.join(model, "config.json")):
        raise ConfigError(f"--model {model}: the directory has no config.json; give a model directory (a run's "
                          "OUTPUT, OUTPUT/merged) or merge an adapter first with `vlmgrpo merge`")
    check_source("--model", model, MODEL)


def model_context(model: str) -> int | None:
    """The longest sequence the model takes, from its config.json (a vision-language model's text_config); None
    when the model is not a local directory or does not say."""
    import json

    try:
        with open(os.path.join(model, "config.json")) as stream:
            config = json.load(stream)
    except (OSError, ValueError):
        return None
    for section in (config.get("text_config") or {}, config):
        if isinstance(section.get("max_position_embeddings"), int):
            return section["max_position_embeddings"]
    return None


def check_port(host: str, port: int) -> None:
    """The public port is free now: a busy one is one line before the engine starts, not an error after it loaded."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); choose another "
                              "port, or stop what holds it") from None


def wait_until_ready(engine: subprocess.Popen, socket_path: str, log_path: str) -> None:
    if wait_for_health(ENGINE_HEALTH, READY_TIMEOUT_S, lambda: engine.poll() is None, socket_path):
        return
    if engine.poll() is not None:
        tail = Path(log_path).read_text(errors="replace").splitlines()[-15:]
        raise LaunchError(f"the serving engine exited ({engine.returncode}) before it was ready; its log "
                          f"{log_path} ends:\n" + "\n".join(tail))
    raise LaunchError(f"the serving engine was not ready after {READY_TIMEOUT_S} s; see {log_path}")


class Engine:
    """The engine's process, started again whenever it dies while we serve (an OOM kill, a crash in a kernel): the
    front answers 503 and /health says so meanwhile, and requests are served again once it is back."""

    def __init__(self, command: list[str], socket_path: str, log_path: str):
        self.command, self.socket_path, self.log_path = command, socket_path, log_path
        self.stopping = threading.Event()
        self.restarts = 0
        self.process = self._start("w")

    def _start(self, mode: str) -> subprocess.Popen:
        with open(self.log_path, mode) as stream:
            # Its own session: a Ctrl-C or a signal to our process group must not stop it before requests finish;
            # and SIGTERM when we die, however we die (SIGKILL, OOM), so it is never left behind holding the GPU.
            return subprocess.Popen(self.command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_stop_with_parent)

    def watch(self) -> None:
        """Run in a thread once the engine was first ready: restart it each time it exits, waiting longer each
        time it dies again at once (up to a minute)."""
        pause = 1.0
        while not self.stopping.is_set():
            code = self.process.wait()
            if self.stopping.is_set():
                return
            self.restarts += 1
            log.warning("the serving engine exited (%s); starting it again (restart %d, log %s)", code,
                        self.restarts, self.log_path)
            self.stopping.wait(pause)
            if self.stopping.is_set():
                return
            with contextlib.suppress(FileNotFoundError):  # the dead engine's socket: uvicorn binds a new one
                os.unlink(self.socket_path)
            self.process = self._start("a")
            ready = wait_for_health(ENGINE_HEALTH, READY_TIMEOUT_S,
                                    lambda: self.process.poll() is None and not self.stopping.is_set(),
                                    self.socket_path)
            pause = 1.0 if ready else min(pause * 2, 60.0)
            if ready:
                log.info("the serving engine is back after restart %d", self.restarts)

    def stop(self) -> None:
        """Every request was answered or refused by now (drain.py): what the engine still runs is for clients already
        told (transformers serve finished a cancelled unstreamed generation before it exited: 30 s and more, before
        app.py asked it for streams). So ENGINE_STOP_S for a clean exit, then SIGKILL: SIGTERM to exit stays within
        Kubernetes' 30 s at the default grace."""
        self.stopping.set()
        started = time.monotonic()
        killed = stop_process(self.process, ENGINE_STOP_S)
        if killed:  # its workers too (vLLM's engine core is a process of its own): the engine leads its session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        log.info("the serving engine %s after %.1f s", f"was killed (no exit {ENGINE_STOP_S:g} s after SIGTERM)"
                 if killed else "stopped", time.monotonic() - started)


def serve(settings: ServeSettings) -> int:
    import uvicorn

    from vlmgrpo.serving.app import build_app

    check_model(settings.model)
    check_port(settings.host, settings.port)  # before minutes of loading, not after "ready"
    engine_name = choose_engine(settings.engine, importlib.util.find_spec("vllm") is not None, cuda_available())
    socket_path = engine_socket()
    command = engine_command(settings, engine_name, socket_path)
    log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"vlmgrpo-serve-{os.getpid()}.log")
    log.info("serving %s as %r with %s: %s (log %s)", settings.model, settings.served_name, engine_name,
             " ".join(command), log_path)
    engine = Engine(command, socket_path, log_path)
    try:
        wait_until_ready(engine.process, socket_path, log_path)
        threading.Thread(target=engine.watch, name="engine-watch", daemon=True).start()
        processor = model_processor(settings.model)
        limits = dataclasses.replace(settings.limits, max_context=model_context(settings.model), engine=engine_name,
                                     special_tokens=special_tokens(processor))
        drain = Drain(settings.shutdown_grace_s)
        app = build_app(socket_path, settings.served_name, engine_model_id(settings, engine_name),
                        limits, prompt_tokens(processor), drain, processor_target(processor))
        log.info("ready: http://%s:%d/v1/chat/completions (model %r)", settings.host, settings.port,
                 settings.served_name)
        if not settings.limits.api_key and settings.host not in ("127.0.0.1", "localhost", "::1"):
            log.warning("serving on %s without an API key: anyone who reaches the port may use the model; set "
                        "--api-key or %s", settings.host, API_KEY_VARIABLE)
        # uvicorn drains (drain.py) on SIGTERM/SIGINT, then raises the signal again with the handler it found: ours
        # turns it into an exit that still runs the `finally` below (the engine is stopped).
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, _exit_on_signal)
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                                timeout_graceful_shutdown=REFUSE_S,
                                http=headers_in_time(settings.limits.read_timeout_s))
        offload.loop_first()
        draining_server(config, drain).run()
        return 0
    finally:
        engine.stop()
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)


def draining_server(config, drain: Drain):
    """uvicorn's server, its shutdown preceded by the drain: while the requests in flight finish, the listener stays
    open and a new request is answered 503 (uvicorn's own shutdown refuses its connection, and cuts what runs past
    its timeout). What is left after the drain, uvicorn's shutdown closes within REFUSE_S."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            if not self.force_exit:  # a second Ctrl-C: nothing is waited for
                await drain.run(lambda: self.force_exit)
            await super().shutdown(sockets)

    return Server(config)


def headers_in_time(seconds: float):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose first request's headers have not all arrived after
    `seconds` (uvicorn times out idle keep-alive connections only: one that sends half its headers was held open
    for good, a file descriptor each)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self.loop.call_later(seconds, self._close_if_no_request)

        def _close_if_no_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

    return Protocol


def _stop_with_parent() -> None:
    """In the engine's process before exec: Linux sends it SIGTERM when its parent, vlmgrpo serve, ends."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _exit_on_signal(number, frame) -> None:
    log.info("stopped by %s", signal.Signals(number).name)  # what became of each request: the shutdown lines
    sys.exit(128 + number)
