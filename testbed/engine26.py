"""A second, modern Docker engine beside the main one, for the tests and the bench: Debian trixie's docker.io (26.1,
built with Go 1.24, whose sha256 uses the CPU's SHA instructions where Docker 20.10's Go 1.19 does not) and the
containerd it runs, in a debootstrapped trixie root of their own on this Debian 12 machine.

Why a root of its own and not a privileged container: the engine then runs as the main one does, on the host's
kernel and disk, with nothing between it and the layers it unpacks, so its pulls measure the engine. Why a network
namespace of its own (ip netns): a second dockerd in the main engine's namespace edits the same bridge and iptables
chains (one started with `--bridge none` has deleted the main engine's docker0); in its own namespace its docker0 and
its rules are its own. It still reaches a registry on loopback: a docker-registry started inside the namespace
serves the very storage directory the host's loopback registry writes (testbed/registry.py), so a push from the main
engine is pulled by this one without any traffic leaving loopback.

Everything it writes is under the work directory (its data root, bind-mounted into the root for one start, so every
start is an empty engine) or a run folder of its own (RUN_DIRS/NETNS: its socket and pid file, bound over the root's
/run/imagegen, the rest of its /run a tmpfs of that start), so two engines run from one root at once; the main
engine's data root, exec root, socket, bridge and iptables are never named. It imports nothing but the standard
library.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from testbed import registry

SUITE, MIRROR = "trixie", "http://deb.debian.org/debian"
PACKAGES = ("docker.io", "iptables", "ca-certificates")  # docker.io depends on containerd, runc and tini
DEFAULT_ROOT = Path(os.environ.get("IMAGEGEN_ENGINE26_ROOT", Path.home() / ".cache" / "imagegen" / "engine26-root"))
NETNS_PREFIX = "imagegen-engine26"
RUN_DIRS = Path("/run/imagegen-engine26")  # one per start, named by its namespace: its socket and pid file
SOCKET, PIDFILE = "docker.sock", "docker.pid"  # in that folder, which the root sees as /run/imagegen
START_TIMEOUT_S, STOP_TIMEOUT_S = 60, 30
_STARTS = itertools.count()  # a process may run two at once: each start's namespace and run folder its own
REGISTRY_PORT = 5000  # the namespace's own loopback: nothing else listens there


class EngineError(RuntimeError):
    """The engine could not be prepared or started; the message ends with its log's tail."""


@dataclass(frozen=True)
class Engine:
    host: str  # DOCKER_HOST for its clients
    netns: str
    version: str
    go_version: str
    store: str  # "overlay2" or "containerd" (the containerd image store)

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}


def prepare(root: Path = DEFAULT_ROOT) -> Path:
    """The trixie root with docker.io, made once (debootstrap then apt: about 35 s here) and kept."""
    if (root / "usr/sbin/dockerd").exists():
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    _run(["debootstrap", "--variant=minbase", SUITE, str(partial), MIRROR], "debootstrap")
    (partial / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")  # install, start nothing
    (partial / "usr/sbin/policy-rc.d").chmod(0o755)
    script = ("mount -t proc proc /proc && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y "
              f"-qq --no-install-recommends {' '.join(PACKAGES)}; status=$?; umount /proc; exit $status")
    _run(["unshare", "--mount", "--propagation", "private", "chroot", str(partial), "sh", "-c", script], "apt-get")
    partial.rename(root)
    return root


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise EngineError(f"{what} exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")


def _start_script(root: Path, data: Path, config: Path, shared: tuple[Path, ...], run: Path) -> str:
    """Run inside the namespace, in a private mount namespace (its mounts vanish with the daemon): the root made a
    mount point (the daemon remounts / when it unpacks), a /run of this start's own (a tmpfs, and `run` over its
/run/imagegen: the socket and pid file the host reaches), its own proc, sysfs and cgroup2, the host's devices and
    resolver (the root's copy is debootstrap's, of the day it was made), the fresh data root bound over
    /var/lib/docker, and each shared host folder at its own path (the daemon resolves `docker run -v HOST:...` inside
    its root)."""
    binds = "".join(f"mkdir -p {root}{path}; mount --bind {path} {root}{path}; " for path in shared)
    return (f"set -e; mount --bind {root} {root}; mount -t tmpfs tmpfs {root}/run; mkdir -p {root}/run/imagegen; "
            f"mount --bind {run} {root}/run/imagegen; "
            f"{binds}mount --bind /etc/resolv.conf {root}/etc/resolv.conf; "
            f"mount -t proc proc {root}/proc; "
            f"mount -t sysfs sysfs {root}/sys; "
            f"mount -t cgroup2 cgroup2 {root}/sys/fs/cgroup; mount --rbind /dev {root}/dev; "
            f"mkdir -p {data} {root}/var/lib/docker; mount --bind {data} {root}/var/lib/docker; "
            f"cp {config} {root}/run/imagegen/daemon.json; "
            f"exec chroot {root} dockerd --config-file /run/imagegen/daemon.json --data-root /var/lib/docker "
            f"--exec-root /run/imagegen/exec -H unix:///run/imagegen/{SOCKET} --pidfile /run/imagegen/{PIDFILE} "
            f"--cgroup-parent /{NETNS_PREFIX}")


def _netns(name: str) -> None:
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    _run(["ip", "netns", "add", name], "ip netns add")
    _run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], "ip link set lo up")


@contextmanager
def _uplink(netns: str) -> Iterator[None]:
    """The namespace's way out, for builds that fetch from the package index: a veth pair to the host, a default
    route through it, and the host masquerading what comes from it, as a host's engine reaches the network. The host
    gains one link and three rules of its own, all removed on leaving: the NAT rule in POSTROUTING, and forwarding
    to and from the link in DOCKER-USER (the chain Docker leaves to its users: the main engine's FORWARD policy drops
    the rest); docker0 and Docker's own chains are never named. Named by the process: one uplinked engine per process."""
    n = os.getpid() % 16384
    subnet, host_address, inner_address = (f"10.226.{n >> 6}.{(n & 63) * 4}/30", f"10.226.{n >> 6}.{(n & 63) * 4 + 1}",
                                           f"10.226.{n >> 6}.{(n & 63) * 4 + 2}")
    outer, inner = f"ig26h{n}", f"ig26n{n}"
    chain = "DOCKER-USER" if not subprocess.run(["iptables", "-n", "-L", "DOCKER-USER"],
                                                capture_output=True).returncode else "FORWARD"
    rules = [("nat", "POSTROUTING", "-s", subnet, "!", "-o", outer, "-j", "MASQUERADE"),
             ("filter", chain, "-i", outer, "-j", "ACCEPT"), ("filter", chain, "-o", outer, "-j", "ACCEPT")]
    in_ns = ["ip", "netns", "exec", netns]
    steps = [["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
             ["ip", "link", "set", inner, "netns", netns], ["ip", "addr", "add", f"{host_address}/30", "dev", outer],
             ["ip", "link", "set", outer, "up"], [*in_ns, "ip", "addr", "add", f"{inner_address}/30", "dev", inner],
             [*in_ns, "ip", "link", "set", inner, "up"], [*in_ns, "ip", "route", "add", "default", "via", host_address],
             *(["iptables", "-t", table, "-I", chain_name, *spec] for table, chain_name, *spec in rules)]
    try:
        for argv in steps:
            _run(argv, " ".join(argv))
        yield
    finally:
        for table, chain_name, *spec in rules:
            subprocess.run(["iptables", "-t", table, "-D", chain_name, *spec], capture_output=True)
        subprocess.run(["ip", "link", "delete", outer], capture_output=True)


@contextmanager
def running(work: Path, root: Path = DEFAULT_ROOT, containerd_store: bool = False,
            max_concurrent_downloads: int = 3, shared: tuple[Path, ...] = (), uplink: bool = False) -> Iterator[Engine]:
    """An empty engine (its data root under `work`) in a namespace of its own, the `shared` host folders visible to
    it at their own paths; with `uplink`, a way out to the network (_uplink) for its builds; stopped, and its
    namespace, link and data removed, on leaving."""
    root = prepare(root)
    netns = f"{NETNS_PREFIX}-{os.getpid()}-{next(_STARTS)}"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "daemon.json"
    config.write_text(json.dumps({"features": {"containerd-snapshotter": containerd_store},
                                  "max-concurrent-downloads": max_concurrent_downloads}))
    _netns(netns)
    with ExitStack() as stack:
        stack.callback(subprocess.run, ["ip", "netns", "delete", netns], capture_output=True)
        if uplink:
            stack.enter_context(_uplink(netns))
        stack.callback(shutil.rmtree, work / "data", ignore_errors=True)
        run = RUN_DIRS / netns
        shutil.rmtree(run, ignore_errors=True)  # a start killed before it could remove its own
        run.mkdir(parents=True)
        stack.callback(shutil.rmtree, run, ignore_errors=True)
        yield stack.enter_context(_started(root, work, config, netns, shared, containerd_store, run))


@contextmanager
def _started(root: Path, work: Path, config: Path, netns: str, shared: tuple[Path, ...],
             containerd_store: bool, run: Path) -> Iterator[Engine]:
    log_path = work / "dockerd.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["ip", "netns", "exec", netns, "unshare", "--mount", "--propagation", "private",
                                    "bash", "-c", _start_script(root, work / "data", config,
                                                                tuple(p.resolve() for p in shared), run)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    host = f"unix://{run / SOCKET}"
    try:
        version = _wait_for(host, process, log_path)
        yield Engine(host, netns, version["Version"], version["GoVersion"],
                     "containerd" if containerd_store else "overlay2")
    finally:
        _stop(process)


def _wait_for(host: str, process: subprocess.Popen, log_path: Path) -> dict:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(f"dockerd exited ({process.returncode}): {log_path.read_text()[-2000:]}")
        done = subprocess.run(["docker", "version", "--format", "{{json .Server}}"], capture_output=True, text=True,
                              env={**os.environ, "DOCKER_HOST": host})
        if done.returncode == 0 and done.stdout.strip() not in ("", "null"):
            return json.loads(done.stdout)
        time.sleep(0.3)
    raise EngineError(f"dockerd did not answer on {host} in {START_TIMEOUT_S} s: {log_path.read_text()[-2000:]}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to dockerd (it stops its containers and containerd), then SIGKILL to what is left of its session."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # containerd-shims it left: the session start_new_session made
    except ProcessLookupError:
        pass
    process.wait()


@contextmanager
def registry_in(engine: Engine, storage: Path, work: Path, port: int = REGISTRY_PORT) -> Iterator[str]:
    """docker-registry inside the engine's namespace, serving `storage` (what the host's registry holds); yields
    "127.0.0.1:PORT" as the engine sees it. Given the host registry's own port, one name means the same repository
    on both sides: what the engine pushes, a host process reads under the same reference, and the other way."""
    config = work / "registry-netns.yml"
    config.write_text(registry.config(port, storage))
    log_path = work / "registry-netns.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["ip", "netns", "exec", engine.netns, "docker-registry", "serve", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT)
    host = f"127.0.0.1:{port}"
    probe = f"import urllib.request; urllib.request.urlopen('http://{host}/v2/', timeout=2)"
    try:
        deadline = time.monotonic() + registry.START_TIMEOUT_S
        while subprocess.run(["ip", "netns", "exec", engine.netns, "python3", "-c", probe],
                             capture_output=True).returncode:
            if process.poll() is not None or time.monotonic() > deadline:
                raise registry.RegistryNotServing(f"docker-registry in {engine.netns}: {log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield host
    finally:
        process.terminate()
        process.wait(timeout=10)
