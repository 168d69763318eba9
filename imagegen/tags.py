"""Tags and labels, derived only from what is inside the image, so that a tag cannot lie.

Version tag (immutable once pushed):
    <trainer>-torch<torch>-cu<torch's CUDA, no dot>-cudnn<major>-py<python>[-<flavor>]
    e.g. 0.1.0-torch2.6.0-cu124-cudnn9-py3.11
Moving aliases (updated on every publish):
    <image name>    the newest build of that matrix entry, e.g. cu124-torch2.6 or cpu
    cu<X.Y>         the newest torch on the CUDA X.Y devel base, e.g. cu12.4
    latest          the image the matrix names as latest
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from packaging.version import Version

if TYPE_CHECKING:
    from .plan import ImageSpec

LABEL_PREFIX = "io.imagegen"


def version_tag(spec: "ImageSpec") -> str:
    tag = (f"{spec.trainer_version}-torch{spec.torch}-cu{spec.torch_cuda.replace('.', '')}"
           f"-cudnn{spec.cudnn_major}-py{spec.python}")
    if spec.flavor == "runtime":
        tag += "-runtime"
    elif spec.flavor == "custom":
        tag += f"-{spec.os}"
    return tag


def assign(specs: list["ImageSpec"], latest: str | None) -> list["ImageSpec"]:
    """Give every spec its version tag and its moving aliases."""
    aliases: dict[str, list[str]] = defaultdict(list)
    for spec in specs:
        aliases[spec.name].append(spec.name)
        if spec.name == latest:
            aliases[spec.name].append("latest")
    for minor, newest in _newest_per_cuda(specs).items():
        aliases[newest].append(f"cu{minor}")
    return [replace(spec, version_tag=version_tag(spec), alias_tags=tuple(aliases[spec.name]))
            for spec in specs]


def _newest_per_cuda(specs: list["ImageSpec"]) -> dict[str, str]:
    newest: dict[str, "ImageSpec"] = {}
    for spec in specs:
        if spec.cuda_minor is None or spec.flavor != "devel":
            continue
        current = newest.get(spec.cuda_minor)
        if current is None or Version(spec.torch) > Version(current.torch):
            newest[spec.cuda_minor] = spec
    return {minor: spec.name for minor, spec in newest.items()}


def duplicate_tags(specs: list["ImageSpec"]) -> list[tuple[str, str, str]]:
    """(tag, image, earlier image) for every tag two images would both carry."""
    owner: dict[str, str] = {}
    found = []
    for spec in specs:
        for tag in (spec.version_tag, *spec.alias_tags):
            if tag in owner and owner[tag] != spec.name:
                found.append((tag, spec.name, owner[tag]))
            owner.setdefault(tag, spec.name)
    return found


def labels(spec: "ImageSpec") -> dict[str, str]:
    """OCI labels plus one label per component version, as `docker inspect` shows them."""
    components = {
        "image": spec.name,
        "trainer": spec.trainer_version,
        "python": spec.python,
        "torch": spec.torch,
        "torch.cuda": spec.torch_cuda,
        "cudnn": spec.cudnn,
        "nccl": spec.nccl,
        "torchvision": spec.torchvision,
        "flash-attn": spec.flash_attn or "none",
        "deepspeed": spec.deepspeed or "none",
        "transformers": spec.transformers,
        "trl": spec.trl,
        "accelerate": spec.accelerate,
        "peft": spec.peft,
        "cuda": spec.cuda or "none",
        "base.cudnn": str(spec.base_cudnn) if spec.base_cudnn is not None else "none",
        "min-driver": spec.min_driver or "none",
    }
    description = (f"GRPO trainer for vision-language models: torch {spec.torch} (CUDA {spec.torch_cuda}), "
                   f"Python {spec.python}, flash-attn {spec.flash_attn or 'none'}, "
                   f"deepspeed {spec.deepspeed or 'none'}, transformers {spec.transformers}, trl {spec.trl}")
    return {
        "org.opencontainers.image.title": spec.repository.rsplit("/", 1)[-1],
        "org.opencontainers.image.description": description,
        "org.opencontainers.image.version": spec.version_tag,
        "org.opencontainers.image.base.name": spec.base_image,
        "org.opencontainers.image.licenses": "Apache-2.0",
        **{f"{LABEL_PREFIX}.{key}": value for key, value in components.items()},
    }
