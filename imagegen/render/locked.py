"""Locked images: a planned image with its lock, the build contexts rendered from them, and the names those
inputs make (inputs digest, version tag, aliases, labels). Only a locked image has a reference.

An image is locked when every one of its platforms has a current lock: its one version tag names the
inputs of all of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

from imagegen.core import platforms
from imagegen.core.errors import Problem
from imagegen.locking.inputs import locked_versions
from imagegen.locking.lockfile import Lock
from imagegen.matrix import cuda_wheels, drivers
from imagegen.matrix.model import Matrix
from imagegen.matrix.plan import PlannedImage
from imagegen.render import tags
from imagegen.render.contexts import LayerContext, Renderer, required_cuda
from imagegen.render.expected import Expected, of_plan


@dataclass(frozen=True)
class LockedImage:
    """One platform of one locked image: what one build makes, and what it is called."""

    plan: PlannedImage
    lock: Lock
    versions: Mapping[str, str | None]  # the plan's, with what the lock pins (torch's cuDNN and NCCL wheels)
    contexts: tuple[LayerContext, ...]  # base, framework, trainer: what is built, with the run's render options
    inputs_digest: str  # sha256 of everything every platform of the image is built from
    version_tag: str
    alias_tags: tuple[str, ...]
    labels: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def platform(self) -> str:
        return self.plan.platform

    @property
    def platforms(self) -> tuple[str, ...]:
        return self.plan.platforms

    @property
    def key(self) -> str:
        return self.plan.key

    @property
    def repository(self) -> str:
        return self.plan.repository

    def ref(self, tag: str | None = None) -> str:
        """This platform's image, locally: cpu's linux/arm64 image is REPOSITORY:TAG-arm64."""
        return f"{self.plan.repository}:{tag or self.version_tag}{platforms.suffix(self.plan.platform)}"

    def expected(self) -> Expected:
        """What its expected.json holds."""
        return of_plan(self.plan, dict(self.versions))

    def as_dict(self) -> dict:
        """The image as plain data: its plan, versions, tags and labels (the lock lives in its own file)."""
        return {**self.plan.as_dict(), "versions": dict(self.versions), "inputs_digest": self.inputs_digest,
                "version_tag": self.version_tag, "alias_tags": list(self.alias_tags), "labels": dict(self.labels),
                "base": self.lock.base.pinned_ref}


def driver_problems(matrix: Matrix, image: LockedImage) -> list[Problem]:
    """Where the image says other than its driver facts admit: the NVIDIA_REQUIRE_CUDA its base layer sets, read as the
    container toolkit reads it, and its driver labels (imagegen.matrix.drivers.disagreements); at the line's facts."""
    driver = image.plan.gpu.driver
    if driver is None:
        return []
    variable = required_cuda(image.contexts[0].dockerfile)
    if variable is None and image.plan.gpu.cuda_source is not None:
        found = ["its base layer sets no NVIDIA_REQUIRE_CUDA: templates/base.Dockerfile.j2 writes it for every image "
                 "with a CUDA line"]
    else:
        found = drivers.disagreements(driver, matrix.drivers.branches, variable, *tags.said_driver(image.labels))
    return [matrix.problem(("cuda", driver.cuda, "driver"), f"image {image.name}: {line}", "driver-requirement")
            for line in found]


def wheel_toolkit(plan: PlannedImage, lock: Lock) -> str | None:
    """The CUDA toolkit a devel image on NVIDIA's wheels installs: the cuda-toolkit version its lock resolved."""
    package = lock.package(cuda_wheels.TOOLKIT) if plan.gpu.cuda_source == "wheels" and plan.has_toolkit else None
    return package.version if package else None


def inputs_digest(layers: list[LayerContext]) -> str:
    """One digest of everything an image is built from: its layers' files (the lock's requirements,
    every Dockerfile with its base's locked digest, the trainer's source)."""
    digest = hashlib.sha256()
    for layer in layers:
        digest.update(f"{layer.layer}\0{layer.digest}\0".encode())
    return f"sha256:{digest.hexdigest()}"


def lock_images(plans: list[PlannedImage], locks: Mapping[str, Lock], renderer: Renderer,
                latest: str | None) -> dict[str, LockedImage]:
    """The locked images by key: each platform of every image whose platforms all have a lock in `locks`
    (by key), rendered once."""
    aliases = tags.aliases(plans, latest)
    by_name: dict[str, list[PlannedImage]] = {}
    for plan in plans:
        by_name.setdefault(plan.name, []).append(plan)
    locked: dict[str, LockedImage] = {}
    for name, members in by_name.items():
        if all(plan.key in locks for plan in members):
            for image in _lock_one(members, locks, renderer, aliases[name]):
                locked[image.key] = image
    return locked


def _lock_one(members: list[PlannedImage], locks: Mapping[str, Lock], renderer: Renderer,
              aliases: tuple[str, ...]) -> list[LockedImage]:
    rendered = {}
    for plan in members:
        versions = locked_versions(plan, locks[plan.key])
        rendered[plan.key] = (versions, *renderer.render(plan, locks[plan.key], versions))
    digest = inputs_digest([layer for key in sorted(rendered) for layer in rendered[key][2]])
    images = []
    for plan in members:
        versions, contexts, _ = rendered[plan.key]
        lock = locks[plan.key]
        tag = tags.version_tag(plan, versions, digest)
        labels = tags.labels(plan, versions, tag, digest, lock.base.pinned_ref, wheel_toolkit(plan, lock))
        images.append(LockedImage(plan, lock, versions, tuple(contexts), digest, tag, aliases, labels))
    return images
