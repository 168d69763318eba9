"""net.infiniband: the RDMA user space NCCL uses between hosts loads, and which InfiniBand/RoCE devices are visible.

Without a device (no HCA, or not passed into the container: `--device /dev/infiniband`, `--cap-add IPC_LOCK`, or the
Kubernetes RDMA device plugin) NCCL uses TCP sockets: skipped with what was found. With one, libibverbs must load.
"""

from __future__ import annotations

import ctypes
import os

from vlmgrpo.checks import FAIL, PASS, SKIP, Context, result

NAMES = ("net.infiniband",)
PHASE = "libraries"
NEEDS = ()
LIBRARY = "libibverbs.so.1"
DEVICES = "/sys/class/infiniband"


def library_problem() -> str | None:
    try:
        ctypes.CDLL(LIBRARY)
    except OSError as exc:
        return f"{LIBRARY} does not load ({exc})"
    return None


def visible_devices() -> list[str]:
    return sorted(os.listdir(DEVICES)) if os.path.isdir(DEVICES) else []


def run(context: Context) -> list[dict[str, str]]:
    problem, devices = library_problem(), visible_devices()
    library = problem or f"{LIBRARY} loads"
    if not devices:
        return [result("net.infiniband", SKIP, f"no InfiniBand/RoCE device visible (NCCL uses TCP sockets); {library}")]
    if problem:
        return [result("net.infiniband", FAIL, f"devices {', '.join(devices)} visible but {problem}: NCCL cannot use "
                                               "them; install ibverbs-providers")]
    return [result("net.infiniband", PASS, f"{library}; devices: {', '.join(devices)}")]
