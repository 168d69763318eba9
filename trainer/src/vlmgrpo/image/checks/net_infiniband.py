"""net.infiniband: the RDMA user space NCCL uses between hosts loads, and which InfiniBand/RoCE devices are visible.

Without a device (no HCA, or not passed into the container: `--device /dev/infiniband`, `--cap-add IPC_LOCK`, or the
Kubernetes RDMA device plugin) NCCL uses TCP sockets: the runner skips it with what was found (NEEDS "rdma"). With
one, libibverbs must load.
"""

from __future__ import annotations

from vlmgrpo.image.checks import FAIL, PASS, Context, result
from vlmgrpo.image.checks._needs import RDMA_LIBRARY, rdma_devices, rdma_library_problem

NAMES = ("net.infiniband",)
PHASE = "libraries"
NEEDS = ("rdma",)


def run(context: Context) -> list[dict[str, str]]:
    problem, devices = rdma_library_problem(), rdma_devices()
    if problem:
        return [result("net.infiniband", FAIL, f"devices {', '.join(devices)} visible but {problem}: NCCL cannot use "
                                               "them; install ibverbs-providers")]
    return [result("net.infiniband", PASS, f"{RDMA_LIBRARY} loads; devices: {', '.join(devices)}")]
