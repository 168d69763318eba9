"""Tags and labels, derived only from what is inside the image and what it is built from, so that
a tag cannot lie and one tag means one set of inputs.

Version tag (immutable once pushed):
    <trainer>-torch<torch>-cu<torch's CUDA, no dot>-cudnn<major>-py<python>[-<key><version>...][-runtime][-<os>]
    -<inputs digest>, where each -<key><version> is a component of the table marked in_name that the image has
    (-vllm0.31.0)
    e.g. 0.1.0-torch2.6.0-cu124-cudnn9-py3.11-3f2a9c1d4e5b; an image on the runtime flavour of its CUDA base
    adds -runtime, one on a base of its own (cpu, or CUDA from NVIDIA's wheels) its OS:
    0.1.0-torch2.14.1-cu130-cudnn9-py3.11-debian12-...
    An image of several platforms has one version tag; each platform's image goes under it with -<arch>.
    The digest covers the lock, the rendered Dockerfiles and the trainer's source: a rebuild from the
    same inputs gets the same tag, any changed input a new one.
Moving aliases (updated on every publish):
    <image name>    the newest build of that matrix entry, e.g. cu124-torch2.6 or cpu
    cu<X.Y>         the newest torch on the CUDA X.Y devel base (nvidia/cuda's), e.g. cu12.4
    latest          the image the matrix names as latest
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from packaging.version import Version

from imagegen.matrix.plan import PlannedImage

LABEL_PREFIX = "io.imagegen"
INPUTS_LABEL = f"{LABEL_PREFIX}.inputs"
BASE_LABEL = "org.opencontainers.image.base.name"
LOCKED_BASE_LABEL = f"{LABEL_PREFIX}.base.locked"  # the lock's base, where --base-image built on another
# What driver the image needs (imagegen.matrix.drivers), as its NVIDIA_REQUIRE_CUDA says it: the oldest for any GPU, and
# the branches that start it on datacenter GPUs alone (through the cuda-compat of an nvidia/cuda base).
MIN_DRIVER_LABEL = f"{LABEL_PREFIX}.min-driver"
DATACENTER_BRANCHES_LABEL = f"{LABEL_PREFIX}.driver.datacenter-branches"
DIGEST_CHARS = 12  # of the inputs digest in the tag; the label carries all of it
Versions = Mapping[str, "str | None"]


def version_prefix(trainer: str | None, versions: Versions, named: Iterable[str] = ()) -> str:
    """The part of the version tag that names what is inside; `imagegen test` rebuilds it from the
    versions the image reports, so both sides use this one function. named: the keys of the components
    marked in_name (expected.json's "in_name"), each added with its version where the image has it."""
    torch = (versions.get("torch") or "").split("+")[0]
    python = ".".join((versions.get("python") or "").split(".")[:2])
    components = "".join(f"-{key}{str(versions[key]).split('+')[0]}" for key in named if versions.get(key))
    return (f"{trainer}-torch{torch}-cu{(versions.get('torch_cuda') or '').replace('.', '')}"
            f"-cudnn{(versions.get('cudnn') or '').split('.')[0]}-py{python}{components}")


def version_tag(plan: PlannedImage, versions: Versions, inputs_digest: str) -> str:
    tag = version_prefix(plan.trainer.version, versions, plan.components.in_name)
    if plan.base.flavor == "runtime":
        tag += "-runtime"
    if plan.base.flavor == "custom" or plan.gpu.cuda_source == "wheels":  # not nvidia/cuda's OS: say which
        tag += f"-{plan.base.os}"
    return f"{tag}-{inputs_digest.removeprefix('sha256:')[:DIGEST_CHARS]}"


def aliases(plans: list[PlannedImage], latest: str | None) -> dict[str, tuple[str, ...]]:
    """The moving aliases of each image (by name), whichever of its platforms are locked."""
    found: dict[str, list[str]] = defaultdict(list)
    for name in dict.fromkeys(plan.name for plan in plans):  # one plan per platform, one set of aliases
        found[name].append(name)
        if name == latest:
            found[name].append("latest")
    for minor, newest in _newest_per_cuda(plans).items():
        found[newest].append(f"cu{minor}")
    return {name: tuple(tags) for name, tags in found.items()}


def _newest_per_cuda(plans: list[PlannedImage]) -> dict[str, str]:
    newest: dict[str, PlannedImage] = {}
    for plan in plans:
        if plan.gpu.cuda_source != "base" or plan.base.flavor != "devel":
            continue
        current = newest.get(plan.gpu.cuda_minor)
        if current is None or Version(plan.version("torch")) > Version(current.version("torch")):
            newest[plan.gpu.cuda_minor] = plan
    return {minor: plan.name for minor, plan in newest.items()}


def description(plan: PlannedImage, versions: Versions, toolkit: str | None = None) -> str:
    """The OCI description: torch and its CUDA, Python, then each column component the image sets itself."""
    named = [f"{c.label} {versions.get(c.key) or 'none'}" for c in plan.components
             if c.column and c.source == "image" and c.key not in ("python", "torch")]
    return (f"GRPO trainer for vision-language models: torch {versions.get('torch')} "
            f"({_cuda_carried(plan, versions, toolkit)}), "
            f"Python {versions.get('python')}, " + ", ".join(named))


def _cuda_carried(plan: PlannedImage, versions: Versions, toolkit: str | None = None) -> str:
    """What CUDA the image carries: its base's toolkit, NVIDIA's wheels, only the libraries torch's wheels bring, or
    none."""
    cuda = versions.get("torch_cuda")
    if plan.gpu.cuda_source == "wheels":
        carried = f"the CUDA toolkit {toolkit} from" if toolkit else "no CUDA toolkit, the CUDA libraries of"
        return f"CUDA {cuda}: {carried} NVIDIA's wheels on {plan.base.image}"
    if plan.gpu.cuda is not None or not cuda:
        return f"CUDA {cuda}" if cuda else "CPU only"
    driver = f"; a GPU needs NVIDIA driver {plan.gpu.min_driver} or newer" if plan.gpu.min_driver else ""
    return f"CUDA {cuda} libraries from torch's wheels, no CUDA toolkit{driver}"


def labels(plan: PlannedImage, versions: Versions, tag: str, inputs_digest: str, base_ref: str,
           toolkit: str | None = None) -> dict[str, str]:
    """OCI labels plus one label per component version, as `docker inspect` shows them. toolkit: the CUDA toolkit
    the lock installs from NVIDIA's wheels (cuda-toolkit's version), for an image whose CUDA comes from them."""
    components = {
        "image": plan.name,
        "trainer": plan.trainer.version,
        **{c.label: versions.get(c.key) or "none" for c in plan.components},  # `none` where it says so
        # The CUDA the image carries: its base's toolkit, or the one torch's wheels bring; cuda.toolkit: the base's.
        "cuda": plan.gpu.cuda or versions.get("torch_cuda") or "none",
        "cuda.toolkit": (toolkit if plan.gpu.cuda_source == "wheels" else plan.gpu.cuda) or "none",
        "base.cudnn": str(plan.base.cudnn) if plan.base.cudnn is not None else "none",
        **driver_labels(plan),
        "inputs": inputs_digest,
    }
    return {
        "org.opencontainers.image.title": plan.repository.rsplit("/", 1)[-1],
        "org.opencontainers.image.description": description(plan, versions, toolkit),
        "org.opencontainers.image.version": tag,
        BASE_LABEL: base_ref,
        "org.opencontainers.image.licenses": "Apache-2.0",
        **{f"{LABEL_PREFIX}.{key}": value for key, value in components.items()},
    }


def driver_labels(plan: PlannedImage) -> dict[str, str]:
    """The driver labels, without their prefix, from the requirement the base layer's NVIDIA_REQUIRE_CUDA is written
    from: `imagegen validate` checks that both say the same."""
    driver = plan.gpu.driver
    return {MIN_DRIVER_LABEL.removeprefix(f"{LABEL_PREFIX}."): driver.min_driver if driver else "none",
            DATACENTER_BRANCHES_LABEL.removeprefix(f"{LABEL_PREFIX}."): " ".join(driver.forward)
            if driver and driver.forward else "none"}


def said_driver(labels: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """(the oldest driver for any GPU, the datacenter branches) as an image's labels say them."""
    branches = labels.get(DATACENTER_BRANCHES_LABEL, "none")
    return labels.get(MIN_DRIVER_LABEL, "none"), tuple(branches.split()) if branches != "none" else ()


def built_on(labels: dict[str, str], base_ref: str | None) -> dict[str, str]:
    """The labels of an image built on base_ref (--base-image: a mirror, a local base) instead of its lock's base:
    the OCI base label names what the layers below really are, and LOCKED_BASE_LABEL the lock's base they stand in
    for (the tag and the inputs stay the lock's)."""
    if not base_ref or base_ref == labels.get(BASE_LABEL):
        return labels
    return {**labels, BASE_LABEL: base_ref, LOCKED_BASE_LABEL: labels[BASE_LABEL]}


def base_label_matches(labels: dict[str, str], locked_base: str) -> bool:
    """The image's base label is the lock's base, or it was built on another that stood in for it."""
    return locked_base in (labels.get(BASE_LABEL), labels.get(LOCKED_BASE_LABEL))
