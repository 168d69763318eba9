"""Section 11: cold start, from a registry to the end of the first training step on an engine that holds nothing.

Each image is pushed to Debian's docker-registry on loopback, then pulled by a second dockerd whose data root is
empty (no image, no layer, no build cache: a fresh node), and run there. The network is loopback, so on a real
node the download comes on top of what is measured here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from .cold_engine import fresh_engine, loopback_registry, registry_bytes
from .common import DOCKER, VLMGRPO, docker, gb, run, table
from .cache import changed_matrix, options, snapshot_inputs
from .cpu_image import build_cpu, cpu_refs, remove_images
from .size import NAIVE_TAG, build_naive

TOOLS = {"skopeo": "skopeo", "podman": "podman", "mksquashfs": "squashfs-tools"}
ENROOT_SQUASH_OPTIONS = ["-comp", "lzo", "-noD"]  # enroot's default (doc/configuration.md, ENROOT_SQUASH_OPTIONS)
CPU, NAIVE = "cpu (ours)", "naive"
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def need_tools() -> None:
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"the cold-start section needs {', '.join(missing)}: apt-get install {' '.join(missing)}")


def inputs(work: Path) -> Path:
    """The tiny model and data, and a one-step config that reads them under /data and writes under /out."""
    data = work / "data"
    run([*VLMGRPO, "make-tiny", "--out", str(data / "tiny")])
    config = {"model_name_or_path": "/data/tiny/model", "reward_funcs": ["iou", "format"],
              "data": [{"path": "/data/tiny/data/rec.jsonl", "image_root": "/data/tiny/data/images",
                        "box_space": "absolute"}],
              "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
              "max_completion_length": 32, "max_steps": 1, "save_steps": 1000, "logging_steps": 1,
              "report_to": "none", "output_dir": "/out/run"}
    (data / "one_step.yaml").write_text(yaml.safe_dump(config))
    # The image runs as its own user (uid 1000), the naive one as root: both read /data, neither owns it.
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)
    return data


def manifest(host: str, repository: str, tag: str) -> dict:
    """A tag's image manifest, as the registry serves it."""
    request = urllib.request.Request(f"http://{host}/v2/{repository}/manifests/{tag}",
                                     headers={"Accept": MANIFEST_TYPES})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def layers(host: str, repository: str, tag: str) -> list[tuple[str, int]]:
    """(digest, compressed bytes) of each layer of a tag, as the registry serves its manifest."""
    return [(layer["digest"], layer["size"]) for layer in manifest(host, repository, tag)["layers"]]


def push(host: str, ref: str, repository: str, work: Path) -> dict:
    target = f"{host}/{repository}:gzip"
    docker("tag", ref, target)
    seconds = run([DOCKER, "push", target], log=work / f"push-{repository.replace('/', '-')}.log")
    return {"target": target, "push_s": seconds, "layers": layers(host, repository, "gzip")}


def push_zstd(host: str, ref: str, work: Path) -> dict:
    """skopeo copies the image from the main engine with every layer recompressed as zstd (docker 20.10 can
    neither push nor pull zstd layers; 23.0 can pull them)."""
    target = f"{host}/bench/cpu:zstd"
    seconds = run(["skopeo", "copy", "--dest-tls-verify=false", "--dest-compress-format", "zstd",
                   f"docker-daemon:{ref}", f"docker://{target}"], log=work / "push-zstd.log")
    return {"target": target, "push_s": seconds, "layers": layers(host, "bench/cpu", "zstd")}


def first_step(target: str, data: Path, work: Path, env: dict, options: tuple[str, ...] = ()) -> tuple[float, float]:
    """`docker run [OPTIONS] IMAGE train` of one step: seconds to the step's line and to the container's exit."""
    out = work / f"out-{abs(hash(target))}"
    out.mkdir()
    out.chmod(0o777)  # written by the image's user
    started = time.monotonic()
    process = subprocess.Popen([DOCKER, "run", "--rm", "--network", "none", "-v", f"{data}:/data:ro", "-v",
                                f"{out}:/out", *options, target, "train", "--config", "/data/one_step.yaml"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    step_s, tail = None, []
    for line in process.stdout:
        tail = (tail + [line])[-30:]
        if step_s is None and re.match(r"step 1/", line):
            step_s = time.monotonic() - started
    if process.wait() != 0 or step_s is None:
        raise RuntimeError(f"one training step in {target} failed ({process.returncode}):\n{''.join(tail)}")
    shutil.rmtree(out, ignore_errors=True)
    return step_s, time.monotonic() - started


def cold_run(target: str, data: Path, work: Path, env: dict) -> dict:
    """On the empty engine: download alone (skopeo to a directory: no unpacking), then docker pull, a container
    that does nothing, one that imports the stack, one step of training."""
    download_dir = work / "download"
    download_s = run(["skopeo", "copy", "--src-tls-verify=false", f"docker://{target}", f"dir:{download_dir}"])
    shutil.rmtree(download_dir)
    pull_s = run([DOCKER, "pull", target], env=env)
    start_s = run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "true", target], env=env)
    imports_s = run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "python", target, "-c",
                     "import torch, transformers, trl"], env=env)
    step_s, exit_s = first_step(target, data, work, env)
    return {"download_s": download_s, "pull_s": pull_s, "start_s": start_s, "imports_s": imports_s,
            "step_s": step_s, "exit_s": exit_s}


def squashfs(target: str, work: Path, env: dict) -> tuple[float, int]:
    """What enroot (pyxis) does with an image before a job starts: its root filesystem as one squashfs file,
    made with enroot's default mksquashfs options, here from `docker export`'s tar on stdin."""
    container = subprocess.run([DOCKER, "create", "--network", "none", "--entrypoint", "true", target], env=env,
                               check=True, capture_output=True, text=True).stdout.strip()
    image = work / "image.sqsh"
    started = time.monotonic()
    export = subprocess.Popen([DOCKER, "export", container], env=env, stdout=subprocess.PIPE)
    subprocess.run(["mksquashfs", "-", str(image), "-tar", "-quiet", *ENROOT_SQUASH_OPTIONS], stdin=export.stdout,
                   check=True, capture_output=True)
    export.wait()
    seconds, size = time.monotonic() - started, image.stat().st_size
    image.unlink()
    subprocess.run([DOCKER, "rm", container], env=env, capture_output=True)
    return seconds, size


def podman_pull(target: str, work: Path) -> float:
    """podman 4.3 pulls zstd layers, which docker 20.10 cannot: gzip and zstd compared on one engine, each
    into empty storage."""
    runroot = tempfile.mkdtemp(prefix="igpod", dir="/tmp")  # podman refuses a runroot over 50 characters
    storage = ["podman", "--root", str(work / "podman"), "--runroot", runroot, "--storage-driver", "overlay"]
    try:
        return run([*storage, "pull", "--tls-verify=false", target], log=work / "podman.log")
    finally:
        subprocess.run([*storage, "system", "reset", "-f"], capture_output=True)
        shutil.rmtree(work / "podman", ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


def stack_change(host: str, work: Path, ours: dict) -> dict:
    """The cpu image built again with one stack package changed (section 1's peft change, locked again) and
    pushed beside ours: which of its layers are the very blobs ours has, and which step made the first that
    is not."""
    inputs = snapshot_inputs(work)
    variant = build_cpu("peft variant", work, *options(inputs, *changed_matrix(inputs)))
    restored = build_cpu("restore", work)  # the cpu tags back on the working tree's image
    pushed = push(host, variant.report["image_id"], "bench/cpu-peft", work)
    theirs = pushed["layers"]
    same = next((index for index, (a, b) in enumerate(zip(ours["layers"], theirs)) if a != b), len(theirs))
    steps = [" ".join(line.split()) for line in reversed(docker(
        "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", variant.report["image_id"]).splitlines())
             if not line.startswith("0B")]
    remove_images(sorted({layer["ref"] for layer in variant.report["layers"]}
                         - {layer["ref"] for layer in restored.report["layers"]}))
    return {"same_layers": same, "layers": len(theirs), "same_bytes": sum(size for _, size in theirs[:same]),
            "bytes": sum(size for _, size in theirs), "push_s": pushed["push_s"],
            "first_new_step": steps[same].split("\t", 1)[-1] if same < len(steps) else "-"}


def shared_bytes(pushed: dict[str, dict]) -> tuple[int, int]:
    """(the sum of each image's compressed layers, the bytes of the distinct layers among them)."""
    every = [layer for image in pushed.values() for layer in image["layers"]]
    return sum(size for _, size in every), sum(dict(every).values())


def measure(work: Path) -> dict:
    need_tools()
    build_cpu("cpu", work)  # from the build cache when the main engine has it
    build_naive(work)
    cpu_ref = cpu_refs()[0]
    data = inputs(work)
    with loopback_registry(work / "registry") as host:
        pushed = {CPU: push(host, cpu_ref, "bench/cpu", work), NAIVE: push(host, NAIVE_TAG, "bench/naive", work)}
        pushed["cpu, zstd"] = push_zstd(host, cpu_ref, work)
        stored = registry_bytes(work / "registry")
        sharing = stack_change(host, work, pushed[CPU])
        with fresh_engine(work) as env:
            cold = {CPU: cold_run(pushed[CPU]["target"], data, work, env)}
            squash = squashfs(pushed[CPU]["target"], work, env)
            # Empty again for the next image (a fresh node), and 6 GB less on this machine's disk.
            subprocess.run([DOCKER, "system", "prune", "-af"], env=env, check=True, capture_output=True)
            cold[NAIVE] = cold_run(pushed[NAIVE]["target"], data, work, env)
        podman = {name: podman_pull(pushed[name]["target"], work) for name in (CPU, "cpu, zstd")}
    return {"pushed": pushed, "stored": stored, "cold": cold, "squash": squash, "podman": podman,
            "sharing": sharing}


def cold_rows(found: dict) -> list[tuple]:
    rows = []
    for name, cold in found["cold"].items():
        compressed = sum(size for _, size in found["pushed"][name]["layers"])
        rows.append((name, gb(compressed), f"{found['pushed'][name]['push_s']:.1f}", f"{cold['download_s']:.1f}",
                     f"{cold['pull_s']:.1f}", f"{cold['start_s']:.1f}", f"{cold['imports_s']:.1f}",
                     f"{cold['step_s']:.1f}", f"**{cold['pull_s'] + cold['step_s']:.1f}**"))
    return rows


def section(work: Path) -> str:
    found = measure(work)
    ours, naive = (found["cold"][name]["pull_s"] + found["cold"][name]["step_s"] for name in (CPU, NAIVE))
    total, distinct = shared_bytes({name: found["pushed"][name] for name in (CPU, NAIVE)})
    gzip_bytes, zstd_bytes = (sum(size for _, size in found["pushed"][name]["layers"]) for name in (CPU, "cpu, zstd"))
    squash_s, squash_size = found["squash"]
    return "\n".join([
        "## 11. Cold start: from a registry to the first step on an empty engine",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + " Download: `skopeo copy` of the image to a "
        "directory (the bytes, no unpacking); pull: `docker pull` (download and unpack); start: `docker run "
        "--entrypoint true`; imports: `docker run --entrypoint python IMAGE -c 'import torch, transformers, trl'`; "
        "step 1: `docker run IMAGE train` of a one-step tiny run, from the command to its step line (container "
        "start, imports, model load and the step).",
        "",
        table(("image", "compressed (gzip)", "push s", "download s", "pull s", "start s", "imports s", "step 1 s",
               "pull + step 1 s"), cold_rows(found)),
        "",
        f"- Ours / naive, pull to the end of step 1: {ours / naive:.2f} ({ours:.1f} s / {naive:.1f} s).",
        f"- In the registry: {gb(found['stored'])} for the three pushes below; the cpu and naive images' layers "
        f"add up to {gb(total)}, of which {gb(total - distinct)} are layers they share (the base).",
        "",
        "Compression of the cpu image's layers (pushed with `docker push` as gzip; copied by `skopeo copy "
        "--dest-compress-format zstd`), each pulled by podman 4.3 into empty storage (docker 20.10 cannot pull "
        "zstd):",
        "",
        table(("layers", "compressed", "push or copy s", "podman pull s"), [
            ("gzip", gb(gzip_bytes), f"{found['pushed'][CPU]['push_s']:.1f}", f"{found['podman'][CPU]:.1f}"),
            ("zstd", gb(zstd_bytes), f"{found['pushed']['cpu, zstd']['push_s']:.1f}",
             f"{found['podman']['cpu, zstd']:.1f}")]),
        "",
        f"- zstd / gzip: {zstd_bytes / gzip_bytes:.2f} of the bytes, "
        f"{found['podman']['cpu, zstd'] / found['podman'][CPU]:.2f} of the pull time.",
        f"- One stack package changed (peft, as in section 1, locked again) and pushed beside ours: "
        f"{found['sharing']['same_layers']} of its {found['sharing']['layers']} layers "
        f"({gb(found['sharing']['same_bytes'])} of {gb(found['sharing']['bytes'])}) are the blobs ours has, "
        f"so its push took {found['sharing']['push_s']:.1f} s and a node that holds ours pulls "
        f"{gb(found['sharing']['bytes'] - found['sharing']['same_bytes'])}; the first new layer is the step "
        f"`{found['sharing']['first_new_step'][:160]}`.",
        f"- enroot's squashfs of the cpu image (`docker export | mksquashfs - -tar {' '.join(ENROOT_SQUASH_OPTIONS)}`,"
        f" enroot's default options): {squash_s:.1f} s, {gb(squash_size)}; pyxis pays this on each node before "
        "its first job with the image.",
    ])


if __name__ == "__main__":  # python -m bench.cold_start DIR: this section alone, printed
    import sys
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    print(section(target))
