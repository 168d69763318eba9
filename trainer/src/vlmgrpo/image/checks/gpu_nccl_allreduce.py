"""gpu.nccl_allreduce: a one-rank all_reduce over NCCL."""

from __future__ import annotations

from vlmgrpo.processes import free_port
from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.nccl_allreduce",)
PHASE = "gpu"
NEEDS = ("gpu",)


def nccl_allreduce() -> tuple[str, str]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        tensor = torch.ones(1024, device="cuda")
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        ok = bool((tensor == 1).all())
    finally:
        dist.destroy_process_group()
    return (PASS if ok else FAIL), "one-rank all_reduce over nccl"


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.nccl_allreduce", *nccl_allreduce())]
