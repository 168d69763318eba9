"""gpu.flash_attn: flash-attn's kernel agrees with torch's SDPA on a causal bf16 attention; in an image with
flash-attn (run_checks skips it in one without)."""

from __future__ import annotations

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.flash_attn",)
PHASE = "gpu"
NEEDS = ("flash_attn", "gpu")
FLASH_TOLERANCE = 2e-2  # bf16 attention: differences come from summation order and bf16 rounding


def flash_attn_check() -> tuple[str, str]:
    import torch
    import torch.nn.functional as F

    try:
        from flash_attn import flash_attn_func
    except ImportError as exc:
        return FAIL, f"flash_attn not importable: {exc}"
    q, k, v = (torch.randn(2, 256, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    diff = (out - ref.transpose(1, 2)).abs().max().item()
    return (PASS if diff <= FLASH_TOLERANCE else FAIL), f"max abs diff vs SDPA {diff:.3g} (tolerance {FLASH_TOLERANCE})"


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.flash_attn", *flash_attn_check())]
