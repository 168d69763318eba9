"""cuda.archs: torch was built for the GPUs the image is for (its expected file's cuda_archs; a CPU image, which lists
none, is skipped by the runner: NEEDS "cuda_archs"; so is a CPU-only torch: "cuda_torch"). Needs no GPU."""

from __future__ import annotations

from vlmgrpo.image.checks import FAIL, PASS, Context, result

NAMES = ("cuda.archs",)
PHASE = "libraries"
NEEDS = ("cuda_archs", "cuda_torch")


def covers(arch_flags: list[str], arch: str) -> bool:
    """Whether torch built with `arch_flags` (sm_80, compute_90, ...) runs on compute capability `arch`.

    A cubin for sm_XY runs on X.Y and later minors of the same major; PTX (compute_XY) is
    compiled on the fly for X.Y and every later architecture. Arch-specific builds (sm_90a) do not count.
    """
    major, minor = (int(part) for part in arch.split("."))
    for flag in arch_flags:
        kind, _, number = flag.partition("_")
        if not number.isdigit():
            continue
        built = (int(number[:-1]), int(number[-1]))
        if kind == "sm" and built[0] == major and built[1] <= minor:
            return True
        if kind == "compute" and built <= (major, minor):
            return True
    return False


def archs_check(expected: dict) -> tuple[str, str]:
    wanted = expected["cuda_archs"]  # some: the runner checked the "cuda_archs" need
    try:
        import torch

        flags = torch._C._cuda_getArchFlags()  # what torch was compiled for; needs no GPU, unlike get_arch_list()
    except (ImportError, AttributeError) as error:
        return FAIL, f"torch cannot say which architectures it was built for: {error}"
    built = flags.split()  # some: the runner checked the "cuda_torch" need
    missing = [arch for arch in wanted if not covers(built, arch)]
    if missing:
        return FAIL, f"torch is built for {' '.join(built)}, which does not run on {', '.join(missing)}"
    return PASS, f"torch's {' '.join(built)} cover {', '.join(wanted)}"


def run(context: Context) -> list[dict[str, str]]:
    return [result("cuda.archs", *archs_check(context.expected))]
