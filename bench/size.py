"""Section 2: the cpu image's size against a naive single-stage build, and what the CUDA variants change."""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

from .common import BASE_IMAGE, IMAGEGEN, REPO, WHEELHOUSE, gb, goal, run, table
from .cpu_image import build_cpu, remove_images

NAIVE_TAG = "imagegen-bench/naive:latest"
SIZE_GOAL = 0.8
CUDA_IMAGE = "cu128-torch2.8"


def locked_image(matrix: Path = REPO / "matrix.yaml", name: str = "cpu"):
    """The locked image of that name (its linux/amd64 platform) in the matrix."""
    from imagegen.workspace import Workspace

    return Workspace(matrix=matrix).load().locked[name]


def naive_context(work: Path) -> Path:
    """The naive Dockerfile with the wheelhouse, the trainer and the contract beside it, as its COPY steps expect."""
    context = work / "naive"
    (context / "wheelhouse").mkdir(parents=True)
    for wheel in WHEELHOUSE.glob("*.whl"):
        os.link(wheel, context / "wheelhouse" / wheel.name)  # same filesystem: no disk for the copy
    for source in ("trainer", "contract"):  # the trainer requires the contract, which no index holds
        shutil.copytree(REPO / source, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(Path(__file__).with_name("naive.Dockerfile"), context / "Dockerfile")
    return context


def build_naive(work: Path) -> str:
    """Build the naive image with the cpu image's versions; its image id."""
    from imagegen.stages.build import detect_ca_bundle
    from imagegen.engine.buildkit import find_build_client

    versions = locked_image().versions
    pins = {key.upper(): versions[key] for key in ("torch", "torchvision", "transformers", "trl", "accelerate",
                                                    "peft")}
    ca_bundle = detect_ca_bundle()
    secrets = {"ca-bundle": ca_bundle} if ca_bundle else {}
    with open(work / "naive.log", "w") as log:
        outcome = find_build_client().build(naive_context(work), [NAIVE_TAG], lambda line: log.write(line + "\n"),
                                            build_args=pins, secrets=secrets)
    shutil.rmtree(work / "naive")
    if not outcome.ok:
        raise RuntimeError(f"naive build failed at {outcome.failed_step}:\n" + "\n".join(outcome.log_tail[-20:]))
    return outcome.image_id


def layer_rows(facts: dict, base_layers: int) -> list[tuple]:
    rows = []
    for index, layer in enumerate(facts["layers"]):
        if layer["size"] == 0:
            continue
        step = " ".join(layer["created_by"].replace("/bin/sh -c ", "").split())
        step = (step[:110] + "...") if len(step) > 110 else step
        origin = BASE_IMAGE if index < base_layers else "ours"
        rows.append((origin, gb(layer["size"]), "`" + step.replace("|", "\\|").replace("`", "'") + "`"))
    return rows


def cuda_variant_diff(work: Path) -> str:
    """The devel and runtime renders of CUDA_IMAGE, as a diff of each layer's Dockerfile."""
    text = (REPO / "matrix.yaml").read_text()
    marker = f"  - name: {CUDA_IMAGE}\n"
    assert text.count(marker) == 1, f"matrix.yaml: expected one image {CUDA_IMAGE}"
    runtime_matrix = work / "matrix-runtime.yaml"
    runtime_matrix.write_text(text.replace(marker, marker + "    flavor: runtime\n"))
    # Another base image, so a lock of its own (same packages: the base is not part of the resolution).
    run([*IMAGEGEN, "lock", "--matrix", str(runtime_matrix), "--image", CUDA_IMAGE],
        log=work / "lock-runtime.log")
    devel, runtime = locked_image(name=CUDA_IMAGE), locked_image(runtime_matrix, CUDA_IMAGE)
    diff = [f"# {devel.ref()}\n# {runtime.ref()}\n"]
    for old, new in zip(devel.contexts, runtime.contexts):
        diff += difflib.unified_diff(old.dockerfile.splitlines(True), new.dockerfile.splitlines(True),
                                     f"devel/{old.layer}/Dockerfile", f"runtime/{new.layer}/Dockerfile", n=0)
    return "".join(diff)


def section(work: Path) -> str:
    from imagegen.engine.containers import image_facts

    ours = image_facts(build_cpu("size", work).report["image_id"])  # from cache after section 1
    naive = image_facts(build_naive(work))
    remove_images([NAIVE_TAG])
    base = image_facts(BASE_IMAGE)
    ratio = ours["size"] / naive["size"]
    added = (ours["size"] - base["size"]) / (naive["size"] - base["size"])
    lines = [
        "## 2. Image size",
        "",
        "Naive: [`bench/naive.Dockerfile`](naive.Dockerfile), one stage FROM the same base, apt lists and pip's "
        "cache left in, the wheelhouse COPYed into the image, same torch, torchvision, transformers, trl, "
        "accelerate, peft and trainer.",
        "",
        table(("image", "size", "above the base"), [
            ("cpu (ours)", gb(ours["size"]), gb(ours["size"] - base["size"])),
            ("naive", gb(naive["size"]), gb(naive["size"] - base["size"])),
            (BASE_IMAGE, gb(base["size"]), "-")]),
        "",
        f"- Ours / naive: {ratio:.2f} (goal <= {SIZE_GOAL}: {goal(ratio <= SIZE_GOAL)}); "
        f"counting only what each adds above the base: {added:.2f}.",
        "",
        "Layers of the cpu image (`docker history`, empty layers left out):",
        "",
        table(("from", "size", "step"), layer_rows(ours, len(base["layers"]))),
        "",
        f"### CUDA images: devel and runtime ({CUDA_IMAGE})",
        "",
        "Rendered, not built: the `nvidia/cuda` bases cannot be pulled on this machine, so their sizes can only "
        "be measured where they can. What `flavor: runtime` changes in the render:",
        "",
        "```diff",
        cuda_variant_diff(work).rstrip("\n"),
        "```",
    ]
    if ratio > SIZE_GOAL:
        biggest = max(ours["layers"], key=lambda layer: layer["size"])
        lines += ["", f"- Why the size goal was missed: the largest layer of ours ({gb(biggest['size'])}) is "
                      f"`{' '.join(biggest['created_by'].split())[:120]}`; shrinking that step is the fix."]
    return "\n".join(lines)
