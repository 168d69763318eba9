"""gpu.flash_attn_4: flash-attention 4's kernels agree with torch's SDPA on a causal bf16 attention, forward and
backward (the gradients of q, k and v), on a GPU it runs on (the runner skips it on another: NEEDS "fa4_arch"); in an
image with flash-attn-4."""

from __future__ import annotations

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("gpu.flash_attn_4",)
PHASE = "gpu"
NEEDS = ("flash_attn_4", "gpu", "fa4_arch")
# bf16 attention: differences come from summation order and bf16 rounding; gradients accumulate more of them.
FORWARD_TOLERANCE, BACKWARD_TOLERANCE = 2e-2, 5e-2


def flash_attn_4_check() -> tuple[str, str]:
    import torch
    import torch.nn.functional as F

    from flash_attn.cute import flash_attn_func

    q, k, v = (torch.randn(2, 256, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    out = out[0] if isinstance(out, tuple) else out  # some releases also return the log-sum-exp
    grad = torch.randn_like(out)
    flash_grads = torch.autograd.grad(out, (q, k, v), grad)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    ref = ref.transpose(1, 2)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad)
    forward = (out - ref).abs().max().item()
    backward = max((a - b).abs().max().item() for a, b in zip(flash_grads, ref_grads))
    major, minor = torch.cuda.get_device_capability()
    passed = forward <= FORWARD_TOLERANCE and backward <= BACKWARD_TOLERANCE
    return (PASS if passed else FAIL), (f"sm{major}{minor}: max abs diff vs SDPA forward {forward:.3g} (tolerance "
                                        f"{FORWARD_TOLERANCE}), backward {backward:.3g} ({BACKWARD_TOLERANCE})")


def run(context: Context) -> list[dict[str, str]]:
    return [result("gpu.flash_attn_4", *flash_attn_4_check())]
