"""Tags and labels, derived only from what is inside the image and what it is built from, so that
a tag cannot lie and one tag means one set of inputs.

Version tag (immutable once pushed):
    <trainer>-torch<torch>-cu<torch's CUDA, no dot>-cudnn<major>-py<python>[-<flavor>]-<inputs digest>
    e.g. 0.1.0-torch2.6.0-cu124-cudnn9-py3.11-3f2a9c1d4e5b
    The digest covers the lock, the rendered Dockerfiles and the trainer's source: a rebuild from the
    same inputs gets the same tag, any changed input a new one.
Moving aliases (updated on every publish):
    <image name>    the newest build of that matrix entry, e.g. cu124-torch2.6 or cpu
    cu<X.Y>         the newest torch on the CUDA X.Y devel base, e.g. cu12.4
    latest          the image the matrix names as latest
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from packaging.version import Version

from imagegen.matrix.components import COMPONENTS

if TYPE_CHECKING:
    from imagegen.matrix.plan import ImageSpec

LABEL_PREFIX = "io.imagegen"
INPUTS_LABEL = f"{LABEL_PREFIX}.inputs"
DIGEST_CHARS = 12  # of the inputs digest in the tag; the label carries all of it


def version_prefix(trainer: str | None, versions: Mapping[str, str | None]) -> str:
    """The part of the version tag that names what is inside; `imagegen test` rebuilds it from the
    versions the image reports, so both sides use this one function."""
    torch = (versions.get("torch") or "").split("+")[0]
    python = ".".join((versions.get("python") or "").split(".")[:2])
    return (f"{trainer}-torch{torch}-cu{(versions.get('torch_cuda') or '').replace('.', '')}"
            f"-cudnn{(versions.get('cudnn') or '').split('.')[0]}-py{python}")


def version_tag(spec: "ImageSpec", inputs_digest: str) -> str:
    tag = version_prefix(spec.trainer_version, spec.versions())
    if spec.flavor == "runtime":
        tag += "-runtime"
    elif spec.flavor == "custom":
        tag += f"-{spec.os}"
    return f"{tag}-{inputs_digest.removeprefix('sha256:')[:DIGEST_CHARS]}"


def assign(specs: list["ImageSpec"], latest: str | None, digests: Mapping[str, str]) -> list["ImageSpec"]:
    """Give every spec its moving aliases and, where its image's inputs digest (all its platforms') is
    known, its version tag and labels."""
    aliases: dict[str, list[str]] = defaultdict(list)
    for name in dict.fromkeys(spec.name for spec in specs):  # one spec per platform, one set of aliases
        aliases[name].append(name)
        if name == latest:
            aliases[name].append("latest")
    for minor, newest in _newest_per_cuda(specs).items():
        aliases[newest].append(f"cu{minor}")
    named = []
    for spec in specs:
        spec = replace(spec, alias_tags=tuple(aliases[spec.name]))
        digest = digests.get(spec.name)
        if digest:
            spec = replace(spec, inputs_digest=digest, version_tag=version_tag(spec, digest))
            spec = replace(spec, labels=labels(spec))
        named.append(spec)
    return named


def _newest_per_cuda(specs: list["ImageSpec"]) -> dict[str, str]:
    newest: dict[str, "ImageSpec"] = {}
    for spec in specs:
        if spec.cuda_minor is None or spec.flavor != "devel":
            continue
        current = newest.get(spec.cuda_minor)
        if current is None or Version(spec.torch) > Version(current.torch):
            newest[spec.cuda_minor] = spec
    return {minor: spec.name for minor, spec in newest.items()}


def labels(spec: "ImageSpec") -> dict[str, str]:
    """OCI labels plus one label per component version, as `docker inspect` shows them."""
    versions = spec.versions()
    components = {
        "image": spec.name,
        "trainer": spec.trainer_version,
        **{c.label: versions[c.key] or "none" for c in COMPONENTS},
        "cuda": spec.cuda or "none",
        "base.cudnn": str(spec.base_cudnn) if spec.base_cudnn is not None else "none",
        "min-driver": spec.min_driver or "none",
        "inputs": spec.inputs_digest or "none",
    }
    description = (f"GRPO trainer for vision-language models: torch {spec.torch} (CUDA {spec.torch_cuda}), "
                   f"Python {spec.python}, flash-attn {spec.flash_attn or 'none'}, "
                   f"deepspeed {spec.deepspeed or 'none'}, transformers {spec.transformers}, trl {spec.trl}")
    return {
        "org.opencontainers.image.title": spec.repository.rsplit("/", 1)[-1],
        "org.opencontainers.image.description": description,
        "org.opencontainers.image.version": spec.version_tag,
        "org.opencontainers.image.base.name": spec.lock.base.pinned_ref if spec.lock else spec.base_image,
        "org.opencontainers.image.licenses": "Apache-2.0",
        **{f"{LABEL_PREFIX}.{key}": value for key, value in components.items()},
    }
