"""Section 19: is the cpu image's digest reproducible?

The cpu image built twice by `imagegen build` from one checkout, each time on an empty Docker 26 with the containerd image store (testbed/engine26.py, a fresh data root each; the same
base loaded into both), then compared: the image's digest, its config's, each layer's diff_id, and, for each layer
that differs, its files: those whose bytes differ, those whose bytes are equal and only their metadata (time, mode,
owner) differs, and those in one build only. Docker 20.10 is not measured: its BuildKit predates SOURCE_DATE_EPOCH,
so its image config's timestamps are the build's time whatever the layers hold."""

# Not part of the section's text (the docstring is): `python -m bench.reproducible DIR` runs it alone.

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from testbed import engine26

from .common import BASE_IMAGE, DOCKER, IMAGEGEN, WHEELHOUSE, goal, run, table

EXAMPLES = 3  # paths named per kind of difference in a layer


@dataclass(frozen=True)
class Entry:
    """One path of a layer: its bytes' sha256 (a link's target, '' for a directory) and its metadata."""
    content: str
    meta: tuple  # mode, uid, gid, mtime, type


def listing(layer_tar) -> dict[str, Entry]:
    """Every path of a layer (an uncompressed or gzip tar, read as a stream) with what it holds."""
    entries = {}
    with tarfile.open(fileobj=layer_tar, mode="r|*") as tar:
        for member in tar:
            if member.isfile():
                sha = hashlib.sha256()
                stream = tar.extractfile(member)
                while chunk := stream.read(4 << 20):
                    sha.update(chunk)
                content = sha.hexdigest()
            else:
                content = member.linkname
            entries[member.name.removeprefix("./")] = Entry(content, (member.mode, member.uid, member.gid,
                                                                      int(member.mtime), member.type))
    return entries


def differences(first: dict[str, Entry], second: dict[str, Entry]) -> dict[str, list[str]]:
    """The paths of two listings of one layer by how they differ: bytes, metadata only, in one listing only."""
    found = {"bytes": [], "metadata": [], "one only": []}
    for path in sorted(first.keys() | second.keys()):
        a, b = first.get(path), second.get(path)
        if a is None or b is None:
            found["one only"].append(path)
        elif a.content != b.content:
            found["bytes"].append(path)
        elif a.meta != b.meta:
            found["metadata"].append(path)
    return found


def saved_layers(env: dict, ref: str) -> tuple[dict, list[dict[str, Entry]]]:
    """The image's config and the listing of each of its layers, bottom first, from one `docker save` stream."""
    save = subprocess.Popen([DOCKER, "save", ref], stdout=subprocess.PIPE, env=env)
    blobs, manifest = {}, None
    with tarfile.open(fileobj=save.stdout, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            content = outer.extractfile(member)
            if member.name == "manifest.json":
                manifest = json.load(content)[0]
            elif member.size < 4 << 20:
                blobs[member.name] = content.read()
            else:
                blobs[member.name] = listing(content)
    if save.wait() or manifest is None:
        raise RuntimeError(f"docker save {ref} failed")
    for name in manifest["Layers"]:
        if isinstance(blobs[name], bytes):  # a layer of a few MB, read whole with the small blobs
            blobs[name] = listing(io.BytesIO(blobs[name]))
    return json.loads(blobs[manifest["Config"]]), [blobs[name] for name in manifest["Layers"]]


def build_once(work: Path) -> dict:
    """The cpu image built on an empty Docker 26 (containerd store): its digests, config and layer listings."""
    with engine26.running(work / "engine", containerd_store=True, uplink=True, shared=(work,)) as engine:
        env = engine.env()
        subprocess.run(f"{DOCKER} save {BASE_IMAGE} | DOCKER_HOST={engine.host} {DOCKER} load", shell=True,
                       check=True, capture_output=True)
        seconds = run([*IMAGEGEN, "build", "--image", "cpu", "--platform", "linux/amd64", "--base-image", BASE_IMAGE,
                       "--wheelhouse", str(WHEELHOUSE), "--context-dir", str(work / "contexts"),
                       "--report", str(work / "build.json")], log=work / "build.log", env=env)
        (entry,) = json.loads((work / "build.json").read_text())["images"]
        config, layers = saved_layers(env, entry["ref"])
        return {"seconds": seconds, "id": entry["image_id"], "config": config, "layers": layers,
                "history": [h for h in config["history"] if not h.get("empty_layer")]}


def layer_rows(first: dict, second: dict) -> list[tuple]:
    rows = []
    diff_ids = (first["config"]["rootfs"]["diff_ids"], second["config"]["rootfs"]["diff_ids"])
    for index, (a, b) in enumerate(zip(*diff_ids)):
        step = first["history"][index].get("created_by", "") if index < len(first["history"]) else ""
        step = step.replace("|", "\\|").replace("`", "'")[:70]
        if a == b:
            rows.append((index, f"`{step}`", a[7:19], "same", "-", "-", "-"))
            continue
        found = differences(first["layers"][index], second["layers"][index])
        rows.append((index, f"`{step}`", f"{a[7:19]} / {b[7:19]}", "**differs**",
                     *(f"{len(paths)}: {', '.join(paths[:EXAMPLES])}" if paths else "0" for paths in found.values())))
    return rows


def section(work: Path) -> str:
    builds = []
    for round_ in (1, 2):
        directory = work / f"build{round_}"
        directory.mkdir()
        builds.append(build_once(directory))
    first, second = builds
    rows = layer_rows(first, second)
    same = sum(row[3] == "same" for row in rows)
    config_keys = sorted(key for key in first["config"].keys() | second["config"].keys()
                         if first["config"].get(key) != second["config"].get(key))
    text = ["## 19. A reproducible digest: the cpu image built twice on two empty engines", "",
            __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(), "",
            table(("build", "image digest", "build s"), [(n + 1, b["id"][7:19], f"{b['seconds']:.0f}")
                                                         for n, b in enumerate(builds)]), "",
            table(("layer", "step", "diff_id", "", "files whose bytes differ", "only metadata differs",
                   "in one build only"), rows), "",
            f"- One digest from two empty engines: {goal(first['id'] == second['id'])} "
            f"({same} of {len(rows)} layers the same; the config differs in: {', '.join(config_keys) or 'nothing'})."]
    return "\n".join(text)


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    print(section(target))
