"""gpu.bf16_matmul: a bf16 matrix product on the GPU agrees with fp32 within bf16's rounding."""

from __future__ import annotations

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.bf16_matmul",)
PHASE = "gpu"
NEEDS = ("gpu",)


def bf16_matmul() -> tuple[str, str]:
    import torch

    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    diff = ((a.bfloat16() @ b.bfloat16()).float() - a @ b).abs().max().item()
    scale = (a @ b).abs().max().item()
    return (PASS if diff <= 0.05 * scale else FAIL), f"max abs diff {diff:.4g} vs fp32 (result scale {scale:.4g})"


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.bf16_matmul", *bf16_matmul())]
