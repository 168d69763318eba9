"""vllm.*: in an image with vLLM (GRPO's rollouts, `use_vllm`), what it needs at run time, before any GPU work.

vllm.import  `import vllm` works and the version it reports is the image's (expected.json, the io.imagegen.vllm label)
vllm.torch   the torch installed is the one vLLM's wheel pins (vllm 0.31.0 requires torch==2.13.0): a torch another
             install replaced loads vLLM's compiled ops against the wrong ABI
vllm.nvcc    a CUDA compiler works: FlashInfer, which vLLM pins, compiles kernels when first used (JIT) with nvcc,
             found as torch's cpp_extension finds CUDA_HOME (CUDA_HOME or CUDA_PATH, nvcc on PATH, /usr/local/cuda);
             it compiles a small kernel, which also needs the toolkit's headers and a host C++ compiler

Attached to images with vLLM (NEEDS): run_checks skips all three, with the reason, in an image without it (expected.json
says none, or no file and none installed). Needs no GPU.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from importlib import metadata
from typing import Mapping, Optional

from vlmgrpo.image.checks import FAIL, PASS, SKIP, Context, expected_version, result
from vlmgrpo.image.checks._needs import find_nvcc
from imagegen_contract.inventory import version_matches

NAMES = ("vllm.import", "vllm.torch", "vllm.nvcc")
PHASE = "components"
NEEDS = ("vllm",)
NVCC_TIMEOUT_S = 30
COMPILE_TIMEOUT_S = 120  # one small kernel: a limit for a hung compiler, with room for a slow, shared machine
PROBE_KERNEL = "__global__ void imagegen_probe(float *x) { x[threadIdx.x] *= 2.0f; }\n"


def installed(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_pin(requires: list[str]) -> Optional[str]:
    """The torch requirement of vLLM's wheel (e.g. "==2.13.0"), from its Requires-Dist lines; None without one."""
    from packaging.requirements import Requirement

    for line in requires:
        requirement = Requirement(line)
        if requirement.name == "torch" and (requirement.marker is None or requirement.marker.evaluate({"extra": ""})):
            return str(requirement.specifier) or None
    return None


def torch_check(requires: list[str], torch_version: Optional[str]) -> tuple[str, str]:
    from packaging.specifiers import SpecifierSet

    pin = torch_pin(requires)
    if pin is None:
        return SKIP, "vllm's metadata requires no particular torch"
    if torch_version is None:
        return FAIL, f"vllm requires torch{pin}; torch is not installed"
    public = torch_version.split("+")[0]  # a local build (2.13.0+cu130) is the release it names
    fits = SpecifierSet(pin).contains(public, prereleases=True)
    return (PASS if fits else FAIL), f"vllm requires torch{pin}, the image has torch {torch_version}"




def nvcc_check(env: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """nvcc is found where FlashInfer looks and compiles a kernel (no GPU needed): the toolkit's headers and the host
    C++ compiler nvcc hands the host code to are there too."""
    path, where = find_nvcc(env)
    if path is None:
        return FAIL, (f"no nvcc ({where}): FlashInfer cannot compile its kernels at run time; vLLM images need a CUDA "
                      "toolkit (a devel base, or CUDA_HOME at the folder of the nvidia-cuda-nvcc wheel)")
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    release = next((line.strip() for line in done.stdout.splitlines() if "release" in line), done.stdout.strip())
    if done.returncode != 0:
        return FAIL, f"{path} (from {where}) --version: {done.stderr.strip()[-500:]}"
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "probe.cu")
        with open(source, "w") as stream:
            stream.write(PROBE_KERNEL)
        compiled = subprocess.run([path, "-c", source, "-o", os.path.join(folder, "probe.o")], capture_output=True,
                                  text=True, timeout=COMPILE_TIMEOUT_S, env={**os.environ, **env})
    if compiled.returncode != 0:
        why = (compiled.stderr.strip() or compiled.stdout.strip()).splitlines()
        return FAIL, f"{path} ({release}) cannot compile a kernel: {why[-1] if why else 'exit %d' % compiled.returncode}"
    return PASS, f"{path} (from {where}): {release}; compiles a kernel"


def import_check(wanted: Optional[str]) -> tuple[str, str]:
    try:
        import vllm
    except Exception as exc:  # an import error inside vLLM (a missing .so, a wrong ABI) is the finding
        return FAIL, f"import vllm: {type(exc).__name__}: {exc}"[:1000]
    version = getattr(vllm, "__version__", None)
    if wanted is None:
        return PASS, f"vllm {version} imports"
    return (PASS if version_matches("vllm", version, wanted) else FAIL), f"vllm {version} imports, expected {wanted}"


def run(context: Context) -> list[dict[str, str]]:
    requires = (metadata.requires("vllm") or []) if installed("vllm") else []
    return [result("vllm.import", *import_check(expected_version(context.expected, "vllm"))),
            result("vllm.torch", *torch_check(requires, installed("torch"))),
            result("vllm.nvcc", *nvcc_check())]
