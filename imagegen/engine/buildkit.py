"""The BuildKit build edge: find a docker client that builds with BuildKit, run builds.

docker-py cannot drive BuildKit (docker/docker-py#2230), so builds go through a docker CLI.
Which CLI works differs between machines: `docker buildx` where the plugin is installed,
otherwise an older client that still accepts DOCKER_BUILDKIT=1 (a 28.x client without
buildx refuses it). `find_build_client` probes the candidates and says which it chose and why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from imagegen.core.errors import UserError
from imagegen.engine.progress import BuildkitProgress, Step

DOCKER_ENV_VAR = "IMAGEGEN_DOCKER"
FALLBACK_DOCKER = "/usr/bin/docker"
PROBE_TIMEOUT_S = 120
LOG_TAIL_LINES = 30

# The oldest engine imagegen builds on: Debian 12's 20.10, CI's (trixie's 26 runs beside it: testbed/engine26.py). An
# older one is refused at start: its BuildKit lacks the cache and bind mounts the templates use.
OLDEST_ENGINE = (20, 10)
SUPPORTED_ENGINES = "Docker Engine 20.10 or newer"
_NO_DAEMON_MARKERS = ("cannot connect to the docker daemon", "is the docker daemon running")
_PROBE_DOCKERFILE = "FROM scratch\nLABEL org.imagegen.probe=buildkit\n"



class DockerCliError(UserError):
    """A user-facing failure of the docker CLI edge; the message is one clear line."""


class BuildClientError(DockerCliError):
    """No usable BuildKit client, or a build request the chosen client cannot honour."""


@dataclass(frozen=True)
class BuildOutcome:
    ok: bool
    image_id: str | None
    duration_s: float
    log_tail: list[str]
    failed_step: str | None
    cached_steps: int
    total_steps: int

    @property
    def fully_cached(self) -> bool:
        return self.ok and self.total_steps > 0 and self.cached_steps == self.total_steps


@dataclass(frozen=True)
class BuildClient:
    """A docker CLI invocation known to build with BuildKit."""

    command: tuple[str, ...]  # everything before the build arguments
    env: dict[str, str]  # extra environment, e.g. DOCKER_BUILDKIT=1
    why: str
    uses_buildx: bool
    builder: str | None = None
    name: str = "docker"  # the client and version, as the io.imagegen.builder label names it

    def build(
        self,
        context: Path,
        tags: list[str],
        log: Callable[[str], None],
        *,
        labels: dict[str, str] | None = None,
        secrets: dict[str, Path] | None = None,
        build_args: dict[str, str] | None = None,
        dockerfile: Path | None = None,
        target: str | None = None,
        on_step: Callable[[Step], None] | None = None,
        progress: str = "plain",
        no_cache: bool = False,
        platform: str | None = None,
    ) -> BuildOutcome:
        """Build context, streaming each output line to log and each step it starts to on_step.

        Step and cache counts come from the plain progress output: other progress modes
        build the same but report 0 steps. A failed build is an outcome, not an exception.
        """
        secrets = secrets or {}
        for secret_id, path in secrets.items():
            if not Path(path).is_file():
                raise BuildClientError(f"build secret {secret_id!r}: no file at {path}")
        request = _Request(context, dockerfile, tags, build_args or {}, labels or {}, secrets, target, progress,
                           no_cache, platform)
        with tempfile.TemporaryDirectory(prefix="imagegen-build-") as scratch:
            iidfile = Path(scratch) / "iid"
            started = time.monotonic()
            exit_code, tail, parser = _stream(request.argv(self, iidfile), {**os.environ, **self.env}, log, on_step)
            duration_s = time.monotonic() - started
            image_id = iidfile.read_text().strip() if iidfile.is_file() else None
        ok = exit_code == 0
        return BuildOutcome(
            ok=ok,
            image_id=image_id if ok else None,
            duration_s=duration_s,
            log_tail=tail,
            failed_step=None if ok else parser.failed_step,
            cached_steps=len(parser.cached & parser.steps),
            total_steps=len(parser.steps),
        )


@dataclass(frozen=True)
class _Request:
    """One build's arguments, as the docker CLI takes them."""

    context: Path
    dockerfile: Path | None
    tags: list[str]
    build_args: dict[str, str]
    labels: dict[str, str]
    secrets: dict[str, Path]
    target: str | None
    progress: str
    no_cache: bool
    platform: str | None

    def argv(self, client: BuildClient, iidfile: Path) -> list[str]:
        argv = [*client.command, f"--progress={self.progress}", "--iidfile", str(iidfile)]
        if client.builder:
            argv += ["--builder", client.builder]
        if self.dockerfile is not None:
            argv += ["--file", str(self.dockerfile)]
        if self.target:
            argv += ["--target", self.target]
        for tag in self.tags:
            argv += ["--tag", tag]
        for key, value in self.build_args.items():
            argv += ["--build-arg", f"{key}={value}"]
        for key, value in self.labels.items():
            argv += ["--label", f"{key}={value}"]
        for secret_id, path in self.secrets.items():
            argv += ["--secret", f"id={secret_id},src={path}"]
        argv += (["--no-cache"] if self.no_cache else []) + (["--platform", self.platform] if self.platform else [])
        return argv + [str(self.context)]


def _stream(
    argv: list[str], env: dict[str, str], log: Callable[[str], None], on_step: Callable[[Step], None] | None = None
) -> tuple[int, list[str], BuildkitProgress]:
    """Run argv, passing each output line to log as it arrives (BuildKit writes to stderr), and each step it
    starts to on_step."""
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    parser = BuildkitProgress()
    with subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            step = parser.feed(line)
            log(line)
            if step and on_step:
                on_step(step)
    return proc.returncode, list(tail), parser


@dataclass(frozen=True)
class _Attempt:
    client: BuildClient | None
    binary: str
    label: str
    failure: str = ""


def find_build_client(preferred: str | None = None, builder: str | None = None) -> BuildClient:
    """Return the first docker CLI that builds with BuildKit, on an engine imagegen supports.

    `preferred` (the --docker option, else $IMAGEGEN_DOCKER) restricts the search to that
    client. `builder` (a buildx builder name) restricts it to buildx.
    """
    preferred = preferred or os.environ.get(DOCKER_ENV_VAR) or None
    attempts: list[_Attempt] = []
    for attempt in _attempts(preferred, builder):
        if attempt.client is not None:
            engine = _run_quietly([attempt.binary, "version", "--format", "{{.Server.Version}}"], {}).stdout.strip()
            refused = engine_refusal(engine)
            if refused:
                raise BuildClientError(refused)
            return _with_failures(attempt.client, attempts)
        attempts.append(attempt)
    raise BuildClientError(_no_client_message(attempts, preferred, builder))


def engine_refusal(version: str) -> str | None:
    """Why imagegen does not build on an engine of this version (`docker version`'s Server.Version); None when it
    does, or when the engine does not say (a daemon that answered the probe builds)."""
    found = re.match(r"(\d+)\.(\d+)", version or "")
    if not found:
        return None
    major, minor = int(found.group(1)), int(found.group(2))
    if (major, minor) < OLDEST_ENGINE:
        return (f"the Docker Engine here is {version}: imagegen supports {SUPPORTED_ENGINES} (its BuildKit builds the "
                "templates' cache and bind mounts); upgrade the engine")
    return None


def _attempts(preferred: str | None, builder: str | None):
    if preferred:
        binary = shutil.which(preferred)
        if binary is None:
            yield _Attempt(None, preferred, preferred, "not found or not executable")
            return
        yield _probe_buildx(binary, builder)
        if builder is None:
            yield _probe_legacy_buildkit(binary)
        return
    on_path = shutil.which("docker")
    if on_path:
        yield _probe_buildx(on_path, builder)
    if builder is not None:
        return
    for binary in _docker_binaries():
        yield _probe_legacy_buildkit(binary)


def _docker_binaries() -> list[str]:
    """Each distinct docker binary on PATH, then the Debian package's own client."""
    seen: set[str] = set()
    found: list[str] = []
    directories = os.environ.get("PATH", "").split(os.pathsep)
    for path in [os.path.join(d, "docker") for d in directories if d] + [FALLBACK_DOCKER]:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            found.append(path)
    return found


def _probe_buildx(binary: str, builder: str | None) -> _Attempt:
    label = f"{binary} buildx"
    answered = _run_quietly([binary, "buildx", "version"], {})
    if answered.returncode != 0:
        return _Attempt(None, binary, label, _buildx_refusal(answered.stdout))
    version = _buildx_version(answered.stdout)
    # buildx answers its version without a daemon; a build would then fail much later.
    daemon = _run_quietly([binary, "info", "--format", "{{.ServerVersion}}"], {})
    if daemon.returncode != 0:
        return _Attempt(None, binary, label, _refusal_reason(daemon.stdout))
    if builder is not None:
        inspected = _run_quietly([binary, "buildx", "inspect", builder], {})
        if inspected.returncode != 0:
            return _Attempt(None, binary, label, f"builder {builder!r}: {_first_error_line(inspected.stdout)}")
    client = BuildClient(
        command=(binary, "buildx", "build", "--load"),
        env={},
        why=f"docker buildx {version}" + (f" (builder {builder})" if builder else ""),
        uses_buildx=True,
        builder=builder,
        name=f"docker buildx {version}",
    )
    return _Attempt(client, binary, label)


def _probe_legacy_buildkit(binary: str) -> _Attempt:
    env = {"DOCKER_BUILDKIT": "1"}
    with tempfile.TemporaryDirectory(prefix="imagegen-probe-") as context:
        (Path(context) / "Dockerfile").write_text(_PROBE_DOCKERFILE)
        # The probe image is label-only FROM scratch, so it has the same id every time.
        probed = _run_quietly([binary, "build", "--progress=plain", "--quiet", context], env)
    version = _client_version(binary)
    label = f"{binary} {version}".rstrip()
    if probed.returncode != 0:
        return _Attempt(None, binary, label, _refusal_reason(probed.stdout))
    client = BuildClient(
        command=(binary, "build"),
        env=env,
        why=f"{label} accepts DOCKER_BUILDKIT=1",
        uses_buildx=False,
        name=" ".join(filter(None, ("docker", version, "(DOCKER_BUILDKIT=1)"))),
    )
    return _Attempt(client, binary, label)


def _run_quietly(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, f"no answer within {PROBE_TIMEOUT_S}s")
    except OSError as err:
        return subprocess.CompletedProcess(argv, 127, str(err))


def _client_version(binary: str) -> str:
    # The client version prints even when no daemon answers (the command then exits 1).
    answered = _run_quietly([binary, "version", "--format", "{{.Client.Version}}"], {})
    first = answered.stdout.strip().splitlines()[:1]
    return _short_version(first[0]) if first and re.match(r"^\d", first[0]) else ""


def _short_version(version: str) -> str:
    match = re.match(r"^(\d+\.\d+)", version)
    return match.group(1) if match else version


def _buildx_version(output: str) -> str:
    match = re.search(r"\bv?(\d+\.\d+(?:\.\d+)?)", output)
    return match.group(1) if match else output.strip()


def _buildx_refusal(output: str) -> str:
    lowered = output.lower()
    if "unknown command" in lowered or "is not a docker command" in lowered:
        return "buildx missing"
    return _first_error_line(output) or "buildx missing"


def _refusal_reason(output: str) -> str:
    lowered = output.lower()
    if any(marker in lowered for marker in _NO_DAEMON_MARKERS):
        return "no Docker daemon answers"
    if "buildx" in lowered and ("missing" in lowered or "broken" in lowered):
        return "buildx missing"
    return _first_error_line(output) or "build probe failed"


def _first_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() or "unknown" in line.lower():
            return line.removeprefix("ERROR: ")
    return lines[0] if lines else ""


def _distinct_failures(attempts: list[_Attempt]) -> list[_Attempt]:
    """Drop an attempt when a later one failed the same binary for the same reason."""
    return [
        attempt
        for i, attempt in enumerate(attempts)
        if not any((a.binary, a.failure) == (attempt.binary, attempt.failure) for a in attempts[i + 1 :])
    ]


def _with_failures(client: BuildClient, failed: list[_Attempt]) -> BuildClient:
    if not failed:
        return client
    refused = "; ".join(f"{a.label} refused: {a.failure}" for a in _distinct_failures(failed))
    return replace(client, why=f"{client.why}; {refused}")


def _no_client_message(attempts: list[_Attempt], preferred: str | None, builder: str | None) -> str:
    tried = "; ".join(f"{a.label}: {a.failure}" for a in _distinct_failures(attempts)) or "no docker client found"
    if any(a.failure == "no Docker daemon answers" for a in attempts):
        return (
            f"no Docker daemon answers ({tried}); start dockerd (on CI: .ci/setup-docker) "
            "or point DOCKER_HOST at a running engine"
        )
    if builder is not None:
        return (
            f"--builder {builder} needs docker buildx ({tried}); install the buildx plugin "
            "and create the builder, or drop --builder"
        )
    where = (
        f"the docker client {preferred} (from --docker or {DOCKER_ENV_VAR}) cannot build with BuildKit"
        if preferred
        else "found no docker client that builds with BuildKit"
    )
    return (
        f"{where} (tried {tried}); install the docker buildx plugin, "
        f"or pass --docker /path/to/docker (or set {DOCKER_ENV_VAR}) naming a client that "
        "accepts DOCKER_BUILDKIT=1"
    )
