"""cuda.deepspeed_op: in an image with DeepSpeed and a CUDA toolkit, DeepSpeed's JIT builds its FusedAdam op with the
toolkit's nvcc (found as torch's cpp_extension finds it) against the image's torch, and the op loads: what ZeRO's
optimizer needs first. Needs no GPU: it compiles for TORCH_CUDA_ARCH_LIST, the newest architecture of the image.
run_checks skips it in an image without DeepSpeed or without a toolkit (NEEDS), as it skips cuda.kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Mapping

from vlmgrpo.image.checks import FAIL, PASS, Context, result
from vlmgrpo.image.checks.cuda_toolkit import target_arch
from imagegen_contract.inventory import installed_version

NAMES = ("cuda.deepspeed_op",)
PHASE = "components"  # after cuda.kernel's: a toolkit that cannot compile a kernel explains this one's failure
NEEDS = ("deepspeed", "toolkit")
DEEPSPEED_TIMEOUT_S = 900  # FusedAdam's two files against torch's headers, one architecture: minutes on 2 cores
FUSED_ADAM = ("from deepspeed.ops.op_builder import FusedAdamBuilder; "
              "module = FusedAdamBuilder().load(verbose=False); "
              "print('loaded', module.__name__, module.__file__)")


def deepspeed_check(env: Mapping[str, str], arch: str) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        variables = {**env, "TORCH_EXTENSIONS_DIR": folder, "TORCH_CUDA_ARCH_LIST": arch}
        try:
            done = subprocess.run([sys.executable, "-c", FUSED_ADAM], capture_output=True, text=True,
                                  timeout=DEEPSPEED_TIMEOUT_S, env=variables)
        except subprocess.TimeoutExpired:
            return FAIL, f"DeepSpeed's FusedAdam did not build within {DEEPSPEED_TIMEOUT_S} s"
    if done.returncode != 0:
        errors = [line for line in (done.stderr + done.stdout).splitlines() if "error" in line.lower()]
        last = (errors or (done.stderr.strip() or done.stdout.strip()).splitlines() or [""])[-1]
        return FAIL, f"DeepSpeed's JIT cannot build FusedAdam: {last.strip()[:500]}"
    return PASS, f"DeepSpeed {installed_version('deepspeed')} built FusedAdam for sm_{arch.replace('.', '')} and loaded it"


def run(context: Context) -> list[dict[str, str]]:
    return [result("cuda.deepspeed_op", *deepspeed_check(context.environ, target_arch(context.expected)))]
