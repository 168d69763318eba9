"""`imagegen matrix --driver VERSION`: which images start on a host's NVIDIA driver, on datacenter GPUs and on others,
and how, before anything is pulled.

Whether an image starts is what the container toolkit decides from its NVIDIA_REQUIRE_CUDA (imagegen.core.
nvidia_require, with the CUDA each branch supports from matrix.yaml's drivers.branches); how is what the facts say
(imagegen.matrix.drivers): its own CUDA, minor-version compatibility, or forward compatibility through the
cuda-compat package that nvidia/cuda bases carry and images on NVIDIA's wheels do not.
"""

from __future__ import annotations

import textwrap

from imagegen.core.nvidia_require import admits, driver_cuda
from imagegen.core.text import aligned
from imagegen.matrix import drivers
from imagegen.matrix.plan import PlannedImage
from imagegen.reports.listing import Listed, cuda_cell
from imagegen_contract.driver import branch, is_version

NOTES = (
    "forward compatibility: the image's CUDA compatibility package (cuda-compat) stands in for the older driver's "
    "libcuda, on datacenter GPUs only (NVIDIA's CUDA Compatibility guide). nvidia/cuda bases carry it; images on "
    "NVIDIA's wheels (debian12-cu*) or torch's do not.",
    "minor-version compatibility: an image without cuda-compat runs its CUDA X.Y on the host's own driver of the same "
    "CUDA major, on any GPU, from the line's minimum; what needs a newer driver (PTX newer than it compiles) fails "
    "when used.",
)
NO_VARIABLE_NOTE = ("*: sets no NVIDIA_REQUIRE_CUDA, so it starts on any driver and runs on the CPU; torch's CUDA on a "
                    "GPU needs what the cell says.")
WIDTH = 116  # of the notes' lines


def problem(driver: str) -> str | None:
    """Why `driver` is not a driver version --driver takes; None when it is one."""
    if is_version(driver) and len(str(branch(driver))) == 3:
        return None
    shown = driver if len(driver) <= 40 else f"{driver[:20]}... ({len(driver)} characters)"
    return f"--driver {shown}: not an NVIDIA driver version such as 550.54.15 (nvidia-smi's \"Driver Version\")"


def report(rows: list[Listed], driver: str, branches: dict[str, str]) -> str:
    """The table of images (one row per image, whatever its platforms) and what it means."""
    cuda = driver_cuda(driver, branches)
    said = f"CUDA {cuda}" if cuda else "older than every branch matrix.yaml's drivers.branches lists"
    cells = [["image", "CUDA", f"datacenter GPUs ({drivers.DATACENTER})", f"other GPUs ({drivers.OTHER})"]]
    seen = set()
    for row in rows:
        if row.plan.name in seen or row.plan.gpu.driver is None:
            continue
        seen.add(row.plan.name)
        cuda_text = cuda_cell(row) if row.plan.gpu.cuda else f"{row.plan.gpu.driver.cuda} (torch's wheels)"
        cells.append([row.plan.name, cuda_text, *(cell(row.plan, driver, brand, branches)
                                                      for brand in (drivers.DATACENTER, drivers.OTHER))])
    lines = [f"NVIDIA driver {driver} (R{branch(driver)}, {said}): the images that start on it", *aligned(cells), ""]
    no_variable = any(r.plan.gpu.driver and not r.plan.gpu.cuda_source for r in rows)
    notes = [*NOTES, *([NO_VARIABLE_NOTE] if no_variable else [])]
    lines += [textwrap.fill(note, WIDTH, initial_indent="- ", subsequent_indent="  ") for note in notes]
    return "\n".join(lines)


def cell(plan: PlannedImage, driver: str, brand: str, branches: dict[str, str]) -> str:
    """yes, and how; or no, and what it needs."""
    req = plan.gpu.driver
    mark = "" if plan.gpu.cuda_source else " *"
    starts = admits([req.variable], driver, brand, branches) if plan.gpu.cuda_source else \
        req.how(driver, brand, branches) is not None
    if starts:
        how = req.how(driver, brand, branches)
        return {drivers.NATIVE: "yes", drivers.MINOR: f"yes: {drivers.MINOR}",
                drivers.FORWARD: "yes: forward compatibility (its cuda-compat)"}.get(how, "yes") + mark
    needs = f"no: needs {req.min_driver}+"
    if brand == drivers.DATACENTER and req.forward:
        needs += f" or R{', R'.join(req.forward)}"
    return needs + mark
