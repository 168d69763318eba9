"""Building an image of the matrix (the cpu image, mostly) through `imagegen build`, as a user runs it."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .common import BASE_IMAGE, DOCKER, IMAGEGEN, WHEELHOUSE, docker, run

LAYER_REPOSITORY = "imagegen-layer/"
# BuildKit's plain progress, as `imagegen build` prefixes it with "[IMAGE LAYER]"
CONTEXT_SENT = r"^\[{image} (\w+)\] #\d+ transferring context: (\S+) (?:([\d.]+)s )?done$"


@dataclass(frozen=True)
class CpuBuild:
    name: str
    wall_s: float  # the whole `imagegen build` command
    report: dict  # its build.json entry: duration_s, size_bytes, image_id, layers
    context_sends: list[tuple[str, str, float]]  # (layer, size, seconds) of each build context sent

    def layer(self, name: str) -> dict:
        return next(layer for layer in self.report["layers"] if layer["layer"] == name)


def build_cpu(name: str, work: Path, *options: str, env: dict | None = None) -> CpuBuild:
    """`imagegen build --image cpu` with the local base and wheelhouse; options such as --trainer DIR."""
    return build_image("cpu", name, work, *options, env=env)


def build_image(image: str, name: str, work: Path, *options: str, env: dict | None = None) -> CpuBuild:
    """`imagegen build --image IMAGE` for linux/amd64 with the local base and wheelhouse; options such as --matrix."""
    directory = work / name
    directory.mkdir(parents=True)
    report = directory / "build.json"
    wall = run([*IMAGEGEN, "build", "--image", image, "--platform", "linux/amd64", "--base-image", BASE_IMAGE,
                "--wheelhouse", str(WHEELHOUSE),
                "--report", str(report), "--context-dir", str(directory / "contexts"), *options],
               log=directory / "build.log", env=env)
    (entry,) = json.loads(report.read_text())["images"]
    return CpuBuild(name, wall, entry, context_sends((directory / "build.log").read_text(), image))


def context_sends(log: str, image: str = "cpu") -> list[tuple[str, str, float]]:
    """What BuildKit's plain progress says it transferred of each layer's build context."""
    sent = re.compile(CONTEXT_SENT.format(image=re.escape(image)), re.MULTILINE)
    return [(layer, size, float(seconds or 0)) for layer, size, seconds in sent.findall(log)
            if size != "2B"]  # the .dockerignore, sent with every build


def cpu_refs() -> list[str]:
    """The cpu image's tags in the real matrix."""
    from imagegen.workspace import Workspace

    cpu = Workspace().load().locked["cpu"]
    return [cpu.ref(tag) for tag in (cpu.version_tag, *cpu.alias_tags)]


def layer_images() -> list[str]:
    """Every imagegen layer image in the engine (imagegen-layer/<layer>:<hash>)."""
    names = docker("images", "--format", "{{.Repository}}:{{.Tag}}").split()
    return [name for name in names if name.startswith(LAYER_REPOSITORY)]


def remove_images(refs: list[str]) -> None:
    """Untag refs (and delete what no other tag holds); a ref already gone is fine."""
    if refs:
        subprocess.run([DOCKER, "rmi", *refs], capture_output=True)
