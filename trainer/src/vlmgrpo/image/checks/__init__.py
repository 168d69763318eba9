"""The in-image checks of `vlmgrpo selftest`: one module per check (or tight family) in this package, found by
discovery (pkgutil over the package, as jupyter/docker-stacks finds its test units), so adding a check is one file
here and its test.

Each check module defines (the contract of imagegen's host checks too, imagegen/stages/checks; both run by the one
runner, imagegen_contract.checkrunner):
  NAMES  tuple of the check names it reports (each is reported when it fails with an exception or a need is unmet);
         a name may stand for a family: "version" covers version.<key> (reported_outside says which names fit);
  PHASE  one of PHASES: modules run, and report, phase by phase, by module name within a phase;
  NEEDS  tuple of what it applies to: "expected" (an expected-versions file: a skip without one, with why), "gpu" (a
         visible GPU), "toolkit" (a CUDA toolkit: nvcc where torch's cpp_extension finds it), "train" (not
         --skip-train), "versions" (not --skip-versions), "libraries_from_torch" (expected.json names cuDNN or
         NCCL that no wheel family pins), "cuda_archs" (expected.json lists the CUDA architectures
         the image is for: not a CPU image), "rdma" (an InfiniBand/RoCE device visible), "compiled_code" (a package of
         the stack ships compiled files), "base_cuda" (the base image holds CUDA libraries), "cuda_torch" (torch is a
         CUDA build), "fa4_arch" (GPU 0 is in flash-attention 4's range: asked after "gpu"), or a component key
         ("vllm", "flash_attn", "deepspeed", "jupyterlab"): an image whose expected.json names a version of it (with
         no file, what is installed).
         run_checks skips a module whose need is unmet without calling it (a missing GPU fails it with --require-gpu):
         this side judges each need (judge_of), the runner applies them, and a check never asks whether it applies;
  run(context) -> list of result(name, status, detail) dicts, the fields of imagegen's Check.

Modules whose names start with "_" are not checks. Every optional library may be missing: a check says so in its
result instead of crashing, and an exception in one check fails its names without hiding the others.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from imagegen_contract import checkrunner
from imagegen_contract.checkrunner import FAIL, GPU, PASS, SKIP
from vlmgrpo.image.checks._needs import base_cuda, compiled_code, cuda_torch, fa4_arch, rdma_device, toolkit_nvcc
from imagegen_contract.inventory import LIBRARY_KEYS, installed_version

NO_GPU = "no GPU visible"
TOOLKIT, TRAIN, CUDA_ARCHS, RDMA, EXPECTED = "toolkit", "train", "cuda_archs", "rdma", "expected"  # nor GPU: not keys
VERSIONS = "versions"  # not --skip-versions
# expected.json names cuDNN or NCCL that no wheel family pins: torch tells their versions, the inventory cannot
LIBRARIES_FROM_TORCH = "libraries_from_torch"
# Needs this machine answers by looking (vlmgrpo.image.checks._needs); ON_GPU ones look at the GPU, so are asked after "gpu".
PROBED = {"compiled_code": compiled_code, "base_cuda": base_cuda, "cuda_torch": cuda_torch, "fa4_arch": fa4_arch}
ON_GPU = ("fa4_arch",)
# The components of the matrix (keys of matrix.yaml's component table) a check may need: the image's expected.json
# names only its own, so they are declared here (tests/test_check_needs.py holds them to the matrix's table).
COMPONENT_NEEDS = ("flash_attn", "flash_attn_4", "deepspeed", "vllm", "jupyterlab")
# Every need this side judges (has, judge_of): a module naming another fails (checkrunner.unknown_need).
NEEDS_JUDGED = (GPU, EXPECTED, TRAIN, LIBRARIES_FROM_TORCH, VERSIONS, CUDA_ARCHS, TOOLKIT, RDMA, *PROBED,
                *COMPONENT_NEEDS)
# The report's sections, in order: what was installed, the libraries as built, the CUDA toolkit, each component's
# own checks, the driver, work on the GPU, then the two-step training run (the slowest, last).
PHASES = ("versions", "libraries", "toolkit", "components", "driver", "gpu", "train")


@dataclass
class Context:
    """What every check may read."""

    expected: Optional[dict]  # imagegen's expected-versions file; None when there is none
    expected_problem: Optional[str] = None  # why the versions cannot be checked (no file, or an unusable one)
    require_gpu: bool = False  # GPU checks fail instead of skip when no GPU is visible
    skip_train: bool = False
    # imagegen test reports the inventory's verdict on the versions itself (also under emulation): not asked twice
    skip_versions: bool = False
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)  # where the toolkit is looked for


def result(name: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail}


def libraries_from_torch(expected: Optional[dict]) -> list[str]:
    """The LIBRARY_KEYS expected.json names that no wheel family pins: torch reports them, the inventory cannot."""
    families = (expected or {}).get("families") or {}
    return [key for key in LIBRARY_KEYS if key in ((expected or {}).get("versions") or {}) and key not in families]


def expected_version(expected: Optional[dict], key: str) -> Any:
    return ((expected or {}).get("versions") or {}).get(key)


def place(module) -> tuple[int, str]:
    """Where a module's checks go: its phase, then its name."""
    return checkrunner.place(module, PHASES)


def discover() -> list:
    """Every check module of the package, phase by phase."""
    return checkrunner.discover(__name__, __path__, PHASES)


def reported_outside(module, results: list[dict[str, str]]) -> list[str]:
    """The names a module reported that its NAMES do not declare (a name, or a family's name then a dot)."""
    return checkrunner.reported_outside(module, [r["name"] for r in results])


def gpu_visible() -> tuple[bool, str]:
    try:
        import torch

        return torch.cuda.is_available(), NO_GPU
    except ImportError as exc:
        return False, f"{NO_GPU} (torch not importable: {exc})"


def has_component(expected: Optional[dict], key: str) -> tuple[bool, str]:
    """Whether the image has a component, and why not: what its expected.json names, as imagegen built it, by the rule
    imagegen's host checks judge by too (checkrunner.component_in); without a file (outside an image), whether its
    distribution is installed."""
    if expected is None:
        distribution = key.replace("_", "-")
        return installed_version(distribution) is not None, f"{distribution} not installed"
    return checkrunner.component_in(expected, key)


def has(need: str, context: Context) -> tuple[bool, str]:
    """Whether a need other than a GPU is met here, and why not."""
    if need == EXPECTED:
        return context.expected is not None, context.expected_problem or "no expected-versions file"
    if need == TRAIN:
        return not context.skip_train, "--skip-train"
    if need == LIBRARIES_FROM_TORCH:
        return bool(libraries_from_torch(context.expected)), ("cuDNN and NCCL are pinned by wheel families: "
                                                              "version.<key> judges them from the inventory")
    if need == VERSIONS:
        return not context.skip_versions, ("--skip-versions: imagegen test reports the inventory's version.<key> "
                                           "checks itself")
    if need == CUDA_ARCHS:
        return bool((context.expected or {}).get("cuda_archs")), "the matrix lists no CUDA architectures for this image"
    if need == TOOLKIT:
        nvcc, why = toolkit_nvcc(context.environ)
        return nvcc is not None, why
    if need == RDMA:
        return rdma_device()
    if need in PROBED:
        return PROBED[need]()
    return has_component(context.expected, need)


def judge_of(context: Context, gpu: Callable[[], tuple[bool, str]]) -> Callable[[str], Optional[tuple[str, str]]]:
    """How this side judges one need: None when met, else (status, why): a missing GPU is a skip, a failure with
    --require-gpu; any other unmet need a skip."""
    def judge(need: str) -> Optional[tuple[str, str]]:
        if need == GPU:
            visible, why = gpu()
            return None if visible else ((FAIL if context.require_gpu else SKIP), why)
        met, why = has(need, context)
        return None if met else (SKIP, why)

    return judge


def unmet_need(module, context: Context, gpu: Callable[[], tuple[bool, str]]) -> Optional[tuple[str, str]]:
    """(status, why) when the module does not apply here: a component, the toolkit or the training run it needs is
    absent (a skip), else no GPU is visible and it needs one (a skip, a failure with --require-gpu), else the GPU is
    not one it runs on (a skip). None when it applies."""
    return checkrunner.unmet_need(module.NEEDS, judge_of(context, gpu), ON_GPU)


def run_checks(context: Context, modules: Optional[list] = None) -> list[dict[str, str]]:
    """The results of the check modules (every one discovered, or those given), each applied by its needs; an
    exception in one (one broken library) fails its names without hiding the other checks."""
    gpu = functools.lru_cache(maxsize=1)(gpu_visible)  # asked once, and only when a check needs a GPU
    return checkrunner.run_checks(discover() if modules is None else modules, context, judge_of(context, gpu), result,
                                  Exception, lambda exc: f"{type(exc).__name__}: {exc}"[:1000], ON_GPU, NEEDS_JUDGED)
