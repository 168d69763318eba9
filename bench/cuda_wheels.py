"""Section 13: the GPU images this machine builds, their CUDA from NVIDIA's wheels on the local Debian base (the
matrix's images naming both cuda and base): build time, size and registry bytes per line, beside what the same
CUDA line's nvidia/cuda base weighs where its registry answers (its manifest's layers)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from testbed.registry import STORAGE

from .cache import options, snapshot_inputs
from .cold_engine import loopback_registry, registry_bytes
from .common import DOCKER, docker, gb, run, table
from .cpu_image import build_image, remove_images


def wheels_images(inputs: Path) -> tuple[object, list]:
    """The matrix, and its locked images whose CUDA comes from NVIDIA's wheels, one platform each (linux/amd64)."""
    from imagegen.workspace import Workspace

    plan = Workspace(matrix=inputs / "matrix.yaml", templates=inputs / "templates", trainer=inputs / "trainer").load()
    return plan.matrix, [image for image in plan.locked.values() if image.plan.gpu.cuda_source == "wheels"
                         and image.platform == "linux/amd64"]


def nvidia_base_bytes(matrix, cuda_minor: str, flavor: str) -> tuple[str, str]:
    """The nvidia/cuda base of the same CUDA line and flavour, and its linux/amd64 layers' bytes as its registry's
    manifest says them; or why they could not be read here."""
    from imagegen.engine.registry.http import ImageReference, RegistryClient, RegistryError, credentials_for

    facts = matrix.cuda[cuda_minor]
    ref = facts.base_devel if flavor == "devel" else facts.base_runtime
    image = ImageReference.parse(ref)
    try:
        client = RegistryClient(image.host, credentials_for(image.host))
        index = client.manifest(image.repository, image.tag)
        manifests = (index or {}).get("manifests") or []
        chosen = next((m for m in manifests if m.get("platform", {}).get("architecture") == "amd64"), None)
        manifest = client.manifest(image.repository, chosen["digest"]) if chosen else index
        return ref, gb(sum(layer["size"] for layer in (manifest or {}).get("layers", [])))
    except (RegistryError, KeyError, TypeError) as error:
        return ref, f"not read here ({str(error)[:90]})"


def pushed_bytes(ref: str, work: Path) -> tuple[int, float]:
    """The image pushed by docker to an empty loopback registry: the bytes it stores, and the push's seconds."""
    with loopback_registry(work) as host:
        target = f"{host}/bench/{ref.split('/')[-1]}"
        docker("tag", ref, target)
        seconds = run([DOCKER, "push", target], log=work / "push.log")
        stored = registry_bytes(work)
        remove_images([target])
    shutil.rmtree(work / STORAGE, ignore_errors=True)  # the pushed blobs, counted
    return stored, seconds


def rows(inputs: Path, work: Path) -> list[tuple]:
    """Each line built cold or from the engine's cache (a whole `imagegen build`), pushed, then removed."""
    matrix, images = wheels_images(inputs)
    found = []
    for image in images:
        build = build_image(image.name, f"build-{image.name}", work, *options(inputs))
        facts = json.loads(subprocess.run([DOCKER, "image", "inspect", build.report["image_id"]],
                                          capture_output=True, text=True, check=True).stdout)[0]
        stored, push_s = pushed_bytes(build.report["ref"], work / f"registry-{image.name}")
        base, base_bytes = nvidia_base_bytes(matrix, image.plan.gpu.cuda, image.plan.base.flavor)
        found.append((image.name, image.plan.base.flavor, image.labels["io.imagegen.cuda.toolkit"],
                      f"{build.wall_s:.0f}", gb(facts["Size"]), gb(stored), f"{push_s:.0f}", base, base_bytes))
        forget(build.report)
    return found


def forget(report: dict) -> None:
    """The image and its layer images (by id, whatever tags them) and uv's cache mount: three images of 7 GB with
    their downloaded wheels did not fit beside each other on this machine's disk (the first run stopped there)."""
    ids = [layer["image_id"] for layer in report.get("layers", []) if layer.get("image_id")]
    subprocess.run([DOCKER, "rmi", "--force", *ids], capture_output=True)
    subprocess.run([DOCKER, "builder", "prune", "--force", "--filter", "type=exec.cachemount"], capture_output=True)


def section(work: Path) -> str:
    inputs = snapshot_inputs(work)
    measured = rows(inputs, work)
    return "\n".join([
        "## 13. GPU images on NVIDIA's wheels: build, size and registry bytes per line",
        "",
        "Each image of the matrix whose CUDA comes from NVIDIA's wheels (it names both `cuda` and `base`), built by "
        "`imagegen build` for linux/amd64 on the local Debian base with the wheelhouse (the whole command, from the "
        "engine's build cache where it held the layers), its size as the engine stores it, then pushed by docker "
        "(gzip) to an empty loopback registry: the bytes that registry stores and the push's seconds. Beside it, "
        "the nvidia/cuda base the same CUDA line would start FROM, its linux/amd64 layers as its registry's "
        "manifest gives them, before a single Python package; where the registry does not answer, why.",
        "",
        table(("image", "flavour", "toolkit", "build s", "size", "registry bytes", "push s", "nvidia/cuda base",
               "its bytes"), measured),
    ])
