"""Section 14: pulling an image by the compression of its layers, onto an engine that holds nothing.

Each image is built by `imagegen build` (from the engine's build cache where it holds the layers), then pushed
three times to Debian's docker-registry on loopback by `imagegen push --compression gzip|zstd|none` (the whole
command, its SBOM included). A second dockerd with an empty data root (a fresh node, started with --debug so
that it logs when it starts and ends unpacking each layer) pulls the gzip and the uncompressed push in turn, twice
each, alternating, and runs one training step of the tiny model after each pull (`docker run IMAGE train`, to the
step's line); it is emptied before each pull. Then the same engine loads (`docker load`) an archive of the very
blobs the registry holds for each push, twice each, alternating: the unpacking alone, with no download beside it
to share the CPU. Docker 20.10 cannot pull zstd: podman 4.3 pulls all three pushes once each, into empty storage.
The network is loopback: on a real node the download comes on top."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from datetime import datetime
from pathlib import Path
from statistics import fmean

from .cold_engine import blob, fresh_engine, loopback_registry
from .cold_start import first_step, inputs, layers, manifest, podman_pull
from .common import DOCKER, IMAGEGEN, docker, gb, run, section_main, table
from .cpu_image import build_image, remove_images

# The cpu image and the GPU line every CI run builds here (CUDA 13.0 from NVIDIA's wheels, devel).
IMAGES = ("cpu", "debian12-cu130-torch2.14")
COMPRESSIONS = ("gzip", "zstd", "none")
DOCKER_PULLS = ("gzip", "none", "gzip", "none")  # alternated: a drift of the machine falls on both alike
# dockerd --debug, as Docker 20.10's layer store and overlay2 driver log each layer they unpack
APPLYING = re.compile(r'time="([^"]+)".*msg="Applying tar in \S*/([0-9a-f]{64})/diff"')
APPLIED = re.compile(r'time="([^"]+)".*msg="Applied tar sha256:[0-9a-f]{64} to ([0-9a-f]{64})')


def need_tools() -> None:
    missing = [tool for tool in ("skopeo", "podman") if shutil.which(tool) is None]  # zstd's push, its pull
    if missing:
        raise RuntimeError(f"the pulls section needs {', '.join(missing)}: apt-get install {' '.join(missing)}")


def push(image: str, compression: str, host: str, work: Path) -> dict:
    """`imagegen push` of the image's linux/amd64 build under HOST/COMPRESSION: its seconds, target and layers."""
    report = work / f"push-{image}-{compression}.json"
    seconds = run([*IMAGEGEN, "push", "--image", image, "--platform", "linux/amd64", "--registry",
                   f"{host}/{compression}", "--skip-tests", "--compression", compression, "--report", str(report)],
                  log=work / f"push-{image}-{compression}.log")
    (result,) = json.loads(report.read_text())["images"]
    repository, tag = f"{compression}/{result['repository']}", result["pushed_tags"][0]
    return {"push_s": seconds, "target": f"{host}/{repository}:{tag}", "layers": layers(host, repository, tag)}


def unpack_seconds(log: Path, start: int) -> float | None:
    """The engine's own figure: the seconds it spent unpacking layers, from its debug log after byte `start`."""
    text = log.read_text(errors="replace")[start:]
    began = {layer: stamp for stamp, layer in APPLYING.findall(text)}
    spans = [(_time(stamp) - _time(began[layer])) for stamp, layer in APPLIED.findall(text) if layer in began]
    return sum(spans) if spans else None


def _time(stamp: str) -> float:
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole).timestamp() + float(f"0.{fraction or 0}")


def load_blobs(pushed: dict, registry: Path, env: dict) -> None:
    """`docker load` of a pushed tag from the registry's own blobs, streamed as an archive (nothing written): the
    layer bytes a pull fetches, as they are (gzip or not; the load decompresses what it finds)."""
    host, _, path = pushed["target"].partition("/")
    image = manifest(host, *path.rsplit(":", 1))
    names = [f"{index}.tar" for index, _ in enumerate(image["layers"])]
    index = json.dumps([{"Config": "config.json", "RepoTags": None, "Layers": names}]).encode()
    load = subprocess.Popen([DOCKER, "load", "-q"], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    with tarfile.open(fileobj=load.stdin, mode="w|") as out:
        entry = tarfile.TarInfo("manifest.json")
        entry.size = len(index)
        out.addfile(entry, io.BytesIO(index))
        out.add(blob(registry, image["config"]["digest"]), "config.json")
        for name, layer in zip(names, image["layers"]):
            out.add(blob(registry, layer["digest"]), name)
    load.stdin.close()
    if load.wait() != 0:
        raise RuntimeError(f"docker load of {pushed['target']}'s blobs failed")


def docker_pulls(pushed: dict[str, dict], data: Path, work: Path, registry: Path) -> dict[str, list[dict]]:
    """Each docker pull of DOCKER_PULLS on the empty engine, then one training step; emptied before each. Then
    each load of DOCKER_PULLS (the same blobs: unpacking with no download beside it)."""
    found: dict[str, list[dict]] = {"gzip": [], "none": []}
    with fresh_engine(work, debug=True) as env:
        log = work / "cold-dockerd.log"
        for compression in DOCKER_PULLS:
            subprocess.run([DOCKER, "system", "prune", "-af"], env=env, check=True, capture_output=True)
            start = log.stat().st_size
            pull_s = run([DOCKER, "pull", pushed[compression]["target"]], env=env)
            unpack_s = unpack_seconds(log, start)
            step_s, _ = first_step(pushed[compression]["target"], data, work, env)
            found[compression].append({"pull_s": pull_s, "unpack_s": unpack_s, "step_s": step_s})
        for turn, compression in enumerate(DOCKER_PULLS):
            subprocess.run([DOCKER, "system", "prune", "-af"], env=env, check=True, capture_output=True)
            start = log.stat().st_size
            load_blobs(pushed[compression], registry, env)
            found[compression][turn // 2]["load_unpack_s"] = unpack_seconds(log, start)
    return found


def stack_share(image_id: str) -> float:
    """Of the image's bytes, the share a change to one stack package sends again: the layer of the stack's install
    step and every layer above it (the steps below are cached and their layers the same)."""
    history = [line.split("\t", 1) for line in reversed(docker(
        "history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", image_id).splitlines())]
    layers = [(int(size), created) for size, created in history if size != "0"]
    first = next(index for index, (_, created) in enumerate(layers) if "requirements/stack.txt" in created)
    return sum(size for size, _ in layers[first:]) / sum(size for size, _ in layers)


def remove_local(report: dict) -> None:
    """The main engine's copy of the image, every tag of it and of its layer images, once it is in the registry
    (built again from the build cache when needed): the pulls' engines need the room."""
    tags = json.loads(docker("image", "inspect", "--format", "{{json .RepoTags}}", report["image_id"]))
    remove_images([*tags, *(layer["ref"] for layer in report["layers"])])


def measure_image(image: str, data: Path, work: Path) -> dict:
    build = build_image(image, image, work)
    share = stack_share(build.report["image_id"])
    registry = work / f"registry-{image}"
    with loopback_registry(registry) as host:
        pushed = {compression: push(image, compression, host, work) for compression in COMPRESSIONS}
        remove_local(build.report)  # a GPU image is 7 GB
        pulls = docker_pulls(pushed, data, work, registry)
        podman = {compression: podman_pull(pushed[compression]["target"], work) for compression in COMPRESSIONS}
    shutil.rmtree(registry, ignore_errors=True)
    raw = [size for _, size in pushed["none"]["layers"]]
    return {"size": build.report["size_bytes"], "pushed": pushed, "pulls": pulls, "podman": podman,
            "largest_layer": max(raw) / sum(raw), "stack_share": share}


def rows(image: str, found: dict) -> list[tuple]:
    out = []
    for compression in COMPRESSIONS:
        pushed = found["pushed"][compression]
        pulls = found["pulls"].get(compression, [])
        docker_cells = ("-", "-", "-", "-", "-") if not pulls else (
            ", ".join(f"{p['pull_s']:.1f}" for p in pulls),
            ", ".join("-" if p["unpack_s"] is None else f"{p['unpack_s']:.1f}" for p in pulls),
            ", ".join("-" if p.get("load_unpack_s") is None else f"{p['load_unpack_s']:.1f}" for p in pulls),
            ", ".join(f"{p['step_s']:.1f}" for p in pulls),
            f"**{fmean([p['pull_s'] + p['step_s'] for p in pulls]):.1f}**")
        out.append((image, compression, gb(sum(size for _, size in pushed["layers"])), f"{pushed['push_s']:.1f}",
                    *docker_cells, f"{found['podman'][compression]:.1f}"))
    return out


def ratios(image: str, found: dict) -> str:
    pulls = found["pulls"]
    pull = fmean([p["pull_s"] for p in pulls["none"]]) / fmean([p["pull_s"] for p in pulls["gzip"]])
    to_step = (fmean([p["pull_s"] + p["step_s"] for p in pulls["none"]])
               / fmean([p["pull_s"] + p["step_s"] for p in pulls["gzip"]]))
    unpack = {key: fmean([p[key] for p in pulls["none"]]) / fmean([p[key] for p in pulls["gzip"]])
              if all(p.get(key) is not None for p in pulls["none"] + pulls["gzip"]) else None
              for key in ("unpack_s", "load_unpack_s")}
    said = {key: "-" if value is None else f"{value:.2f}" for key, value in unpack.items()}
    bytes_ratio = (sum(size for _, size in found["pushed"]["none"]["layers"])
                   / sum(size for _, size in found["pushed"]["gzip"]["layers"]))
    return (f"- {image}: uncompressed / gzip, docker pull {pull:.2f} (goal <= 0.7: {'met' if pull <= 0.7 else '**missed**'}), "
            f"pull to the end of step 1 {to_step:.2f}; unpacking in the pull {said['unpack_s']}, unpacking alone "
            f"(load) {said['load_unpack_s']}; registry bytes {bytes_ratio:.2f}, push "
            f"{found['pushed']['none']['push_s'] / found['pushed']['gzip']['push_s']:.2f}; podman pull none / gzip "
            f"{found['podman']['none'] / found['podman']['gzip']:.2f}, zstd / gzip "
            f"{found['podman']['zstd'] / found['podman']['gzip']:.2f}. Its largest layer holds "
            f"{found['largest_layer']:.2f} of its bytes (goal <= 0.5); a change to one stack package sends "
            f"{found['stack_share']:.2f} of them again (goal: shares >= 0.9).")


def section(work: Path, images: tuple[str, ...] = IMAGES) -> str:
    need_tools()
    data = inputs(work)
    found = {}
    for image in images:
        found[image] = measure_image(image, data, work)
        # Said at once: a later image that fails (a full disk) does not take this one's figures with it.
        print(json.dumps({image: {key: value for key, value in found[image].items()}}, default=str), file=sys.stderr,
              flush=True)
    return "\n".join([
        "## 14. Pulling by layer compression: gzip, zstd and none onto an empty engine",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + " Unpack: the engine's own figure, the sum over "
        "layers of the time from its \"Applying tar\" to its \"Applied tar\" log line (in a pull, downloads run "
        "beside it; in a load, nothing does).",
        "",
        table(("image", "layers", "registry bytes", "push s", "docker pull s", "unpack s", "load: unpack s", "step 1 s",
               "pull + step 1 s (mean)", "podman pull s"),
              [row for image in images for row in rows(image, found[image])]),
        "",
        *(ratios(image, found[image]) for image in images),
    ])


if __name__ == "__main__":  # python -m bench.pulls DIR [IMAGE ...]: this section alone, printed
    section_main(section, IMAGES)
