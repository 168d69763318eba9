"""`vlmgrpo selftest`: the in-image checks, as JSON that `imagegen test` reads.

Output contract: {"checks": [{"name", "status": pass|fail|skip, "detail"}], "passed", "failed", "skipped"}.
Runs outside Docker too: every optional library may be missing, and each check reports that instead of crashing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Optional

from . import audit
from .info import cudnn_parts, cudnn_version, expected_path, installed_version, nccl_version, read_expected

NO_GPU = "no GPU visible"
FLASH_TOLERANCE = 2e-2  # bf16 attention: differences come from summation order and bf16 rounding
TRAIN_TIMEOUT_S = 900

PASS, FAIL, SKIP = "pass", "fail", "skip"


def check(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


# --- versions -----------------------------------------------------------------------------------------------------


def same_public_version(installed: str, expected: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(installed).public) == Version(Version(str(expected)).public)
    except InvalidVersion:
        return installed.split("+")[0] == str(expected).split("+")[0]


def first_parts(value: str, count: int) -> tuple[int, ...]:
    return tuple(int(part) for part in str(value).split(".")[:count])


def installed_of(key: str, distribution: Optional[str]) -> Optional[str]:
    if key == "torch_cuda":
        try:
            import torch

            return torch.version.cuda
        except ImportError:
            return None
    return installed_version(distribution) if distribution else None


def version_check(key: str, expected: Any, distribution: Optional[str]) -> dict[str, str]:
    name = f"version.{key}"
    if key == "python":
        actual = f"{sys.version_info.major}.{sys.version_info.minor}"
        ok = first_parts(expected, 2) == (sys.version_info.major, sys.version_info.minor)
        return check(name, PASS if ok else FAIL, f"python {actual}, expected {expected}")
    if key in ("cudnn", "nccl"):
        return library_version_check(key, expected)
    if distribution is None and key != "torch_cuda":
        return check(name, FAIL, f"the expected file names no distribution for {key}")
    actual = installed_of(key, distribution)
    if expected is None:
        if actual is None:
            return check(name, PASS, f"{key} absent, as expected")
        return check(name, FAIL, f"{key} {actual} installed, expected absent")
    if actual is None:
        return check(name, FAIL, f"{key} not installed, expected {expected}")
    ok = same_public_version(actual, expected)
    return check(name, PASS if ok else FAIL, f"{key} {actual}, expected {expected}")


def library_version_check(key: str, expected: Any) -> dict[str, str]:
    """cudnn/nccl as torch reports them; unqueryable (e.g. no GPU driver) is a skip, not a failure."""
    name = f"version.{key}"
    if expected is None:
        return check(name, SKIP, f"{key} not expected (null)")
    if key == "cudnn":
        raw, why = cudnn_version()
        actual = cudnn_parts(raw) if raw else None
    else:
        actual, why = nccl_version()
    if actual is None:
        return check(name, SKIP, why or f"{key} cannot be queried")
    ok = tuple(actual[:3]) == first_parts(expected, 3)
    return check(name, PASS if ok else FAIL, f"{key} {'.'.join(map(str, actual))}, expected {expected}")


def version_checks(expected: Optional[dict], reason: Optional[str]) -> list[dict[str, str]]:
    """One check per component the expected file names: imagegen's table decides which."""
    if expected is None or reason:
        return [check("version", SKIP if expected is None else FAIL, reason)]
    distributions = expected.get("distributions") or {}
    return [version_check(key, wanted, distributions.get(key)) for key, wanted in expected["versions"].items()]


def expected_version(expected: Optional[dict], key: str) -> Any:
    return ((expected or {}).get("versions") or {}).get(key)


def user_check() -> dict[str, str]:
    uid = os.getuid()
    if uid == 0:
        return check("user.nonroot", FAIL, "running as root (uid 0); the image should run as an unprivileged user")
    return check("user.nonroot", PASS, f"uid {uid}")


# --- GPU ----------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nvidia_smi() -> tuple[str, str]:
    try:
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FAIL, f"nvidia-smi did not run: {exc}"
    lines = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    if result.returncode or not lines:
        return FAIL, f"nvidia-smi -L exited {result.returncode}: {(result.stderr or result.stdout).strip()[:200]}"
    return PASS, "; ".join(lines)


def cuda_check(gpu_count: Optional[int]) -> tuple[str, str]:
    import torch

    count = torch.cuda.device_count()
    if gpu_count is not None and count != gpu_count:
        return FAIL, f"{count} GPU(s) visible, expected {gpu_count}"
    return PASS, f"{count} GPU(s): " + ", ".join(torch.cuda.get_device_name(i) for i in range(count))


def bf16_matmul() -> tuple[str, str]:
    import torch

    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    diff = ((a.bfloat16() @ b.bfloat16()).float() - a @ b).abs().max().item()
    scale = (a @ b).abs().max().item()
    return (PASS if diff <= 0.05 * scale else FAIL), f"max abs diff {diff:.4g} vs fp32 (result scale {scale:.4g})"


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


def flash_attn_check(expected: Optional[dict]) -> tuple[str, str]:
    import torch
    import torch.nn.functional as F

    try:
        from flash_attn import flash_attn_func
    except ImportError as exc:
        wanted = expected_version(expected, "flash_attn")
        return (FAIL if wanted else SKIP), f"flash_attn not importable: {exc}"
    q, k, v = (torch.randn(2, 256, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    diff = (out - ref.transpose(1, 2)).abs().max().item()
    return (PASS if diff <= FLASH_TOLERANCE else FAIL), f"max abs diff vs SDPA {diff:.3g} (tolerance {FLASH_TOLERANCE})"


def deepspeed_ops(expected: Optional[dict]) -> tuple[str, str]:
    if installed_version("deepspeed") is None:
        wanted = expected_version(expected, "deepspeed")
        return (FAIL if wanted else SKIP), "deepspeed not installed"
    try:
        command = [shutil.which("ds_report")] if shutil.which("ds_report") else [
            sys.executable, "-c", "from deepspeed.env_report import cli_main; cli_main()"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return FAIL, f"ds_report did not run: {exc}"
    ops = [" ".join(line.split()) for line in result.stdout.splitlines() if "[" in line and "]" in line
           and ("OKAY" in line or "NO" in line or "YES" in line)]
    if result.returncode:
        return FAIL, f"ds_report exited {result.returncode}: {result.stderr.strip()[-300:]}"
    return PASS, "; ".join(ops)[:2000]


def gpu_checks(expected: Optional[dict], require_gpu: bool) -> list[dict[str, str]]:
    checks: list[tuple[str, Callable[[], tuple[str, str]]]] = [
        ("gpu.nvidia_smi", nvidia_smi),
        ("gpu.cuda_available", lambda: cuda_check((expected or {}).get("gpu_count"))),
        ("gpu.bf16_matmul", bf16_matmul),
        ("gpu.nccl_allreduce", nccl_allreduce),
        ("gpu.flash_attn", lambda: flash_attn_check(expected)),
        ("gpu.deepspeed_ops", lambda: deepspeed_ops(expected)),
    ]
    try:
        import torch

        available, why = torch.cuda.is_available(), NO_GPU
    except ImportError as exc:
        available, why = False, f"{NO_GPU} (torch not importable: {exc})"
    if not available:
        return [check(name, FAIL if require_gpu else SKIP, why) for name, _ in checks]
    return run_checks(checks)


def run_checks(checks: list[tuple[str, Callable[[], tuple[str, str]]]]) -> list[dict[str, str]]:
    results = []
    for name, run in checks:
        try:
            status, detail = run()
        except Exception as exc:  # one broken library must not hide the other checks
            status, detail = FAIL, f"{type(exc).__name__}: {exc}"[:1000]
        results.append(check(name, status, detail))
    return results


# --- training -----------------------------------------------------------------------------------------------------


def tiny_train_check() -> dict[str, str]:
    """Two real GRPO steps through the CLI on a tiny generated model, in a child process."""
    name = "train.tiny_grpo"
    for module in ("trl", "transformers", "torch"):
        if installed_version(module) is None:
            return check(name, FAIL, f"{module} not installed")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vlmgrpo-selftest-") as work:
        environment = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        command = [sys.executable, "-m", "vlmgrpo"]
        try:
            made = subprocess.run(command + ["make-tiny", "--out", work, "--rows", "4"], capture_output=True,
                                  text=True, timeout=TRAIN_TIMEOUT_S, env=environment)
            if made.returncode:
                return check(name, FAIL, f"make-tiny exited {made.returncode}: {made.stderr.strip()[-500:]}")
            paths = json.loads(made.stdout.strip().splitlines()[-1])
            result = subprocess.run(
                command + ["train", "--model", paths["model"], "--data", paths["data"], "--image-root",
                           paths["image_root"], "--output", os.path.join(work, "out"), "--max-steps", "2",
                           "--num-generations", "2", "--batch-size", "2", "--max-completion-length", "8",
                           "--save-steps", "1000", "--set", "gradient_accumulation_steps=1"],
                capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S, env=environment,
            )
        except subprocess.TimeoutExpired:
            return check(name, FAIL, f"did not finish within {TRAIN_TIMEOUT_S} s")
        seconds = time.monotonic() - started
        if result.returncode:
            return check(name, FAIL, f"train exited {result.returncode}: {result.stderr.strip()[-800:]}")
        steps = [line for line in result.stdout.splitlines() if line.startswith("step ")]
        if len(steps) != 2:
            return check(name, FAIL, f"expected 2 logged steps, got {len(steps)}: {result.stdout[-500:]}")
        return check(name, PASS, f"2 GRPO steps in {seconds:.1f} s (incl. model generation); last: {steps[-1]}")


def audit_checks(expected: Optional[dict]) -> list[dict[str, str]]:
    """The checks that need no GPU: extensions load, torch's CUDA architectures, CUDA libraries twice."""
    return run_checks([("abi.extensions", audit.extensions_check),
                       ("cuda.archs", lambda: audit.archs_check(expected)),
                       ("audit.cuda_duplicates", audit.duplicates_check)])


def run_selftest(expected_option: Optional[str], require_gpu: bool = False, skip_train: bool = False) -> dict:
    path = expected_path(expected_option)
    expected, reason = read_expected(path)
    checks = version_checks(expected, reason)
    checks.append(user_check())
    checks.extend(audit_checks(expected))
    checks.extend(gpu_checks(expected, require_gpu))
    if skip_train:
        checks.append(check("train.tiny_grpo", SKIP, "--skip-train"))
    else:
        checks.append(tiny_train_check())
    counts = {status: sum(1 for c in checks if c["status"] == status) for status in (PASS, FAIL, SKIP)}
    return {"checks": checks, "passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP]}
