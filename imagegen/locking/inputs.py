"""What an image's lock is resolved from, and what a lock tells about the image: pure functions between a
PlannedImage and its Lock.

A lock records these inputs; one made from other inputs is stale. `locked_versions` reads back what only
the lock knows (the cuDNN and NCCL wheels torch pins), and `fact_problems` compares that with the matrix's
typed facts for `imagegen validate`.
"""

from __future__ import annotations

from imagegen.core.errors import Problem
from imagegen.locking.lockfile import BUILD_TOOLS, INSTALLER, Lock
from imagegen.matrix import cuda_wheels
from imagegen.matrix.components import Component
from imagegen.matrix.versions import torch_build
from imagegen.matrix.model import Matrix
from imagegen.matrix.plan import PlannedImage, index_of


def lock_inputs(plan: PlannedImage) -> dict:
    """What the image's lock is resolved from; a lock made from other inputs is stale."""
    flash_attn = None
    if plan.version("flash_attn"):
        flash_attn = {"version": plan.version("flash_attn"),
                      "build": "source" if plan.kernels.flash_attn_source_build else "wheel",
                      "requirement": flash_attn_requirement(plan), "requires": list(plan.kernels.flash_attn_requires)}
    return {
        "python": plan.version("python"),
        "platform": plan.base.python_platform,
        "torch_index": plan.torch.index_url,
        "requirements": list(resolution_requirements(plan)),
        "flash_attn": flash_attn,
        "base": plan.base.image,
    }


def resolution_requirements(plan: PlannedImage) -> tuple[str, ...]:
    """Everything the lock resolves: the image's pins, the trainer's needs, what flash-attn needs
    (flash-attn itself has no resolvable metadata: its lock entry is an artifact), build tools and
    the installer."""
    wanted = [c.requirement(version, plan.version("torch_cuda")) for c, version in component_pins(plan)]
    wanted += [*plan.trainer.requirements, *plan.kernels.flash_attn_requires, INSTALLER]
    if plan.version("deepspeed") or plan.kernels.flash_attn_source_build:
        wanted += BUILD_TOOLS
    if plan.gpu.cuda_source == "wheels" and plan.has_toolkit:
        wanted.append(cuda_wheels.toolkit_requirement(plan.gpu.cuda_minor))
    return tuple(sorted(set(wanted), key=str.lower))


def component_pins(plan: PlannedImage) -> list[tuple[Component, str]]:
    """The components whose distribution the lock holds at exactly the image's version (torch, torchvision, every
    pinned row), each with that version as its index names it: the PyTorch index's torch==2.7.1+cu128."""
    local = f"+cu{plan.version('torch_cuda').replace('.', '')}" if plan.torch.index_url else ""
    pins = []
    for c in plan.components:
        version = plan.version(c.key) if c.distribution and not c.artifact else None
        if version:
            pins.append((c, version + (local if c.distribution in ("torch", "torchvision") else "")))
    return pins


def flash_attn_requirement(plan: PlannedImage) -> str | None:
    """flash-attn as pip installs it: the prebuilt wheel's URL, or the sdist to compile."""
    version = plan.version("flash_attn")
    if not version:
        return None
    if plan.kernels.flash_attn_source_build:
        return f"flash-attn=={version}"
    return f"flash-attn @ {plan.kernels.flash_attn_wheel_url}"


def locked_versions(plan: PlannedImage, lock: Lock) -> dict[str, str | None]:
    """The plan's versions with what the lock pins in their place (torch's cuDNN and NCCL wheels)."""
    locked = {key: lock.family_version(family) for key, family in plan.components.families.items()}
    return {key: locked.get(key) or version for key, version in plan.versions.items()}


def fact_problems(matrix: Matrix, plan: PlannedImage, lock: Lock) -> list[Problem]:
    """Facts of the matrix that the image's lock (read from the index) contradicts."""
    entry = matrix.images[index_of(matrix, plan.name)]
    build = torch_build(matrix, entry)
    problems = []
    for key, family in plan.components.families.items():
        typed, locked = getattr(build, key, None), lock.family_version(family)
        if typed is None or locked == typed:
            continue
        path = ("torch", plan.version("torch"), "builds", build.cuda, key)
        problems.append(matrix.problem(path, f"torch {plan.version('torch')}'s CUDA {build.cuda} build pins {family}* "
                                       f"{locked} in {plan.name}'s lock (read from the index), the matrix says "
                                       f"{typed}: correct the matrix", "lock-facts"))
    return problems
