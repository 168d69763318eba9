"""The components of an image as data: the rows of matrix.yaml's `components` table.

Tags, labels (the description too), expected.json, the listing and report columns, the image keys
of the matrix, the rules, the lock and the in-image checks all iterate this table. Adding a component
is its row in matrix.yaml, its facts under `packages`, its version per image (or under `defaults`)
and a re-lock: no code changes.

The code knows a few rows by key, because their versions come from facts the code reads (torch's
builds, Python's source, flash-attn's wheels, DeepSpeed's ops); `CORE_KEYS` lists them and the
schema refuses a table without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

# Rows the code reads by key: the matrix must keep them.
CORE_KEYS = ("python", "torch", "torch_cuda", "cudnn", "nccl", "torchvision", "flash_attn", "deepspeed",
             "transformers")
IMAGE, TORCH = "image", "torch"  # where a component's version comes from


@dataclass(frozen=True)
class Component:
    key: str  # the image key, the key in expected.json and in `vlmgrpo info`'s versions
    title: str  # column heading in the listing and the report page
    label: str  # the image carries io.imagegen.<label>
    # The Python distribution installed for it: the image pins it, the lock holds it at exactly that version,
    # `vlmgrpo selftest` reads it back. None for Python itself and for what torch's build decides.
    distribution: str | None = None
    source: str = IMAGE  # IMAGE: each image says its version; TORCH: the image's torch release and build say it
    image_key: bool = True  # an image (or defaults) may set it; TORCH components only to repeat what torch says
    # Read back from the lock: the version of the one distribution whose name starts with this (torch's cuDNN
    # and NCCL wheels: nvidia-cudnn-cu12, nvidia-nccl-cu13, ...).
    lock_family: str | None = None
    required: bool = False  # every image pins it; the others may be `none`
    artifact: bool = False  # no index resolves it (flash-attn's wheels): a wheel URL or a source build
    column: bool = True  # a column of `imagegen matrix` and the report, and named in the image's description
    # The images that have it, and only they, are named ...-<key><major.minor> (cu130-torch2.13-vllm0.31): a tag
    # pattern users (and the trainer's messages) can find them by.
    in_name: bool = False
    # The trainer's extra (an [project.optional-dependencies] key of trainer/pyproject.toml) that the images that
    # have it install with the stack: JupyterLab's `lab` brings ipywidgets, the TensorBoard proxy and matplotlib.
    trainer_extra: str | None = None
    # CUDA major -> the extra of its distribution that an image whose torch is built for that CUDA takes
    # (flash-attn-4[cu13] brings the CUTLASS DSL's CUDA 13 libraries; on CUDA 12 it needs none).
    cuda_extras: tuple[tuple[str, str], ...] = ()

    def requirement(self, version: str, torch_cuda: str | None) -> str:
        """The pin the lock resolves it by: name[extra]==version, the extra chosen by the torch build's CUDA major."""
        extra = dict(self.cuda_extras).get((torch_cuda or "").split(".")[0])
        return f"{self.distribution}{f'[{extra}]' if extra else ''}=={version}"

    @property
    def pinned(self) -> bool:
        """An image key whose distribution the lock resolves at exactly the image's version."""
        return self.source == IMAGE and self.distribution is not None and not self.artifact


@dataclass(frozen=True)
class Components:
    """The table, in its order."""

    rows: tuple[Component, ...]

    def __iter__(self) -> Iterator[Component]:
        return iter(self.rows)

    def __getitem__(self, key: str) -> Component:
        return next(c for c in self.rows if c.key == key)

    def __contains__(self, key: str) -> bool:
        return any(c.key == key for c in self.rows)

    def only(self, keys) -> Components:
        """The rows whose key is among keys, in the table's order."""
        return Components(tuple(c for c in self.rows if c.key in keys))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.rows)

    @property
    def in_name(self) -> tuple[str, ...]:
        """The keys an image's name and version tag carry with their version where it has them (-vllm...)."""
        return tuple(c.key for c in self.rows if c.in_name)

    @property
    def pinned(self) -> tuple[Component, ...]:
        return tuple(c for c in self.rows if c.pinned)

    @property
    def distributions(self) -> dict[str, str]:
        """Component key -> the distribution installed for it."""
        return {c.key: c.distribution for c in self.rows if c.distribution}

    @property
    def families(self) -> dict[str, str]:
        """Component key -> the name prefix of the distribution the lock pins for it."""
        return {c.key: c.lock_family for c in self.rows if c.lock_family}

    @property
    def torch_families(self) -> dict[str, str]:
        """Those of the components torch decides (cuDNN, NCCL): the distributions a torch wheel pins for them."""
        return {c.key: c.lock_family for c in self.rows if c.lock_family and c.source == TORCH}

    def of_distribution(self, name: str) -> Component | None:
        return next((c for c in self.rows if c.distribution and _canonical(c.distribution) == _canonical(name)),
                    None)


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")
