"""gpu.cuda_available: torch sees the GPUs, as many as the expected file's gpu_count when it names one."""

from __future__ import annotations

from typing import Optional

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.cuda_available",)
PHASE = "gpu"
NEEDS = ("gpu",)


def cuda_check(gpu_count: Optional[int]) -> tuple[str, str]:
    import torch

    count = torch.cuda.device_count()
    if gpu_count is not None and count != gpu_count:
        return FAIL, f"{count} GPU(s) visible, expected {gpu_count}"
    return PASS, f"{count} GPU(s): " + ", ".join(torch.cuda.get_device_name(i) for i in range(count))


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.cuda_available", *cuda_check((context.expected or {}).get("gpu_count")))]
