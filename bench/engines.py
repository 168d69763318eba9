"""Section 16: a cold pull to the first training step on the engines users run: Docker 20.10 (this machine's) beside
Docker 26.1 (Debian trixie's, testbed/engine26.py), whose Go hashes with the CPU's SHA instructions and which pulls
zstd; on Docker 26 with its overlay2 store and with the containerd image store.

Each image is built by `imagegen build`, pushed by `imagegen push --compression gzip|zstd|none` to Debian's
docker-registry on loopback, then pulled by each engine from empty (Docker 20.10 pruned before each pull, Docker 26
started afresh on an empty data root for each), in rounds that alternate engine and compression, and run to its
first finished GRPO step of the tiny model (`docker run IMAGE train`). Parts: the pull, a container that does
nothing (start), the run to the step's line (imports, model load, step). Docker 20.10 cannot pull zstd. Every
engine downloads three layers at a time (max-concurrent-downloads 3, the default)."""

# Not part of the section's text (the docstring's second paragraph on is): BENCH_ENGINE_ROUNDS=N sets the rounds
# (default 2); the section says how many ran.

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Iterator

from testbed import engine26

from .cold_engine import fresh_engine, loopback_registry
from .cold_start import first_step, inputs
from .common import DOCKER, gb, goal, run, section_main, table
from .cpu_image import build_image
from . import pull_parts
from .pulls import push, remove_local

IMAGES = ("cpu", "debian12-cu130-torch2.14")  # the goal is the CUDA 13 wheels line's pull + first step <= 60 s
ROUNDS = int(os.environ.get("BENCH_ENGINE_ROUNDS", "2"))
# The disk a round needs at its peak, in image sizes: the registry holds the image three ways (gzip and zstd about
# half of it each, none all of it: 2) while one engine holds a pull's downloaded layers and their unpacked copy (2).
DISK_NEED_IMAGES = 4.2
PULLS = (("20.10", "gzip"), ("20.10", "none"), ("26", "gzip"), ("26", "zstd"), ("26", "none"),
         ("26 containerd", "gzip"), ("26 containerd", "zstd"), ("26 containerd", "none"))
GOAL_S, GOAL_RATIO = 60.0, 0.6


@contextmanager
def empty_engine(engine: str, work: Path, storage: Path, host: str) -> Iterator[tuple[dict, str, dict]]:
    """(the docker CLI's environment, the registry host as that engine reaches it, the engine's version facts)."""
    if engine == "20.10":
        with fresh_engine(work) as env:
            facts = json.loads(subprocess.run([DOCKER, "version", "--format", "{{json .Server}}"], env=env,
                                              capture_output=True, text=True, check=True).stdout)
            yield env, host, {"version": facts["Version"], "go": facts["GoVersion"]}
        return
    store = engine.endswith("containerd")
    with engine26.running(work / "engine26", containerd_store=store, shared=(work,)) as modern, \
            engine26.registry_in(modern, storage, work) as inner:
        yield modern.env(), inner, {"version": modern.version, "go": modern.go_version}


def cold_pull(engine: str, target: str, work: Path, storage: Path, host: str, data: Path) -> dict:
    with empty_engine(engine, work, storage, host) as (env, reach, facts):
        ref = target.replace(host, reach, 1)
        if engine == "20.10":
            subprocess.run([DOCKER, "system", "prune", "-af"], env=env, check=True, capture_output=True)
        pull_s = run([DOCKER, "pull", ref], env=env)
        start_s = run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "true", ref], env=env)
        step_s, _ = first_step(ref, data, work, env)
    return {"pull_s": pull_s, "start_s": start_s, "step_s": step_s, **facts}


def check_disk(work: Path, image: str, size_bytes: int) -> None:
    """Refuse before the pushes (minutes) rather than at a pull that runs out of space (Docker says only that the
    pull failed): a run of the CUDA line failed so at its second pull with 24 GB free."""
    free, need = shutil.disk_usage(work).free, DISK_NEED_IMAGES * size_bytes
    if free < need:
        raise RuntimeError(f"{gb(free)} free under {work}; cold pulls of {image} ({gb(size_bytes)}) need about "
                           f"{gb(need)}: free some (docker builder prune --filter until=1h; not docker image prune -a, which "
                           "also removes the local/debian bases the builds go FROM) and run again")


def measure_image(image: str, data: Path, work: Path) -> dict:
    build = build_image(image, image, work)
    check_disk(work, image, build.report["size_bytes"])
    registry = work / f"registry-{image}"
    with loopback_registry(registry) as host:
        pushed = {compression: push(image, compression, host, work) for compression in ("gzip", "zstd", "none")}
        remove_local(build.report)
        found: dict[tuple[str, str], list[dict]] = {}
        for _ in range(ROUNDS):
            for engine, compression in PULLS:
                figures = cold_pull(engine, pushed[compression]["target"], work, registry / "storage", host, data)
                found.setdefault((engine, compression), []).append(figures)
                print(json.dumps({"image": image, "engine": engine, "compression": compression, **figures}),
                      file=sys.stderr, flush=True)  # each pull as it ends: a later failure keeps it
        parts = {compression: pull_parts.measure(pushed[compression], compression, registry,
                                                 work / "unpack-scratch") for compression in pushed}
    shutil.rmtree(registry, ignore_errors=True)
    return {"size": build.report["size_bytes"], "pushed": pushed, "pulls": found, "parts": parts}


def rows(image: str, found: dict) -> list[tuple]:
    pulls, out = found["pulls"], []
    for (engine, compression), tries in pulls.items():
        gzip_here, gzip_old = (fmean([t["pull_s"] for t in pulls[(name, "gzip")]]) for name in (engine, "20.10"))
        pull = fmean([t["pull_s"] for t in tries])
        total = fmean([t["pull_s"] + t["step_s"] for t in tries])
        layers = sum(size for _, size in found["pushed"][compression]["layers"])
        out.append((image, f"{engine} ({tries[0]['version']}, {tries[0]['go']})", compression, gb(layers),
                    ", ".join(f"{t['pull_s']:.1f}" for t in tries), f"{fmean([t['start_s'] for t in tries]):.1f}",
                    ", ".join(f"{t['step_s']:.1f}" for t in tries), f"**{total:.1f}**", f"{pull / gzip_here:.2f}",
                    f"{pull / gzip_old:.2f}"))
    return out


def verdict(image: str, found: dict) -> str:
    pulls = found["pulls"]
    old = fmean([t["pull_s"] for t in pulls[("20.10", "gzip")]])
    best = min(((engine, compression) for engine, compression in pulls if engine != "20.10"),
               key=lambda key: fmean([t["pull_s"] + t["step_s"] for t in pulls[key]]))
    ratio = fmean([t["pull_s"] for t in pulls[best]]) / old
    total = fmean([t["pull_s"] + t["step_s"] for t in pulls[best]])
    return (f"- {image}: the best on Docker 26 is {best[1]} on {best[0]}: its pull {ratio:.2f} of the gzip pull on "
            f"20.10 (goal <= {GOAL_RATIO}: {goal(ratio <= GOAL_RATIO)}), pull + first step {total:.1f} s (goal <= "
            f"{GOAL_S:g} s: {goal(total <= GOAL_S)}).")


def said(image: str, found: dict) -> str:
    """The image's figures as one JSON line, said as soon as they exist (a later failure keeps them in the log)."""
    pulls = {f"{engine} {compression}": tries for (engine, compression), tries in found["pulls"].items()}
    return json.dumps({image: {**found, "pulls": pulls}}, default=str)


def sha_ni() -> bool:
    return " sha_ni " in open("/proc/cpuinfo").read().replace("\n", " ")


def section(work: Path, images: tuple[str, ...] = IMAGES) -> str:
    data = inputs(work)
    found = {}
    for image in images:
        found[image] = measure_image(image, data, work)
        print(said(image, found[image]), file=sys.stderr, flush=True)
    return render(found)


def render(found: dict) -> str:
    """The section's text from its figures (as measured, or as `said` logged them: `python -m bench.engines
    --from-log LOG` writes the text again from a run's log)."""
    images = tuple(found)
    return "\n".join([
        "## 16. Cold pull to the first step on Docker 20.10 and Docker 26",
        "",
        __doc__.split("\n\n", 1)[1].replace("\n", " ").strip() + f" The CPU has SHA instructions (sha_ni): "
        f"{'yes' if sha_ni() else 'no'}. Rounds: {ROUNDS} (each engine and compression pulled {ROUNDS} "
        f"time{'s' if ROUNDS != 1 else ''}).",
        "",
        table(("image", "engine (version, Go)", "layers", "registry bytes", "pull s", "start s (mean)", "to step 1 s",
               "pull + step 1 s (mean)", "pull / gzip, same engine", "pull / gzip on 20.10"),
              [row for image in images for row in rows(image, found[image])]),
        "",
        *(verdict(image, found[image]) for image in images),
        "",
        "### Where a pull's time goes",
        "",
        pull_parts.__doc__.replace("\n", " ").strip(),
        "",
        table(pull_parts.HEADER, [row for image in images
                                  for row in pull_parts.rows(image, found[image]["parts"], found[image]["pushed"])]),
    ])


def from_log(log: Path) -> dict:
    """The figures `said` logged, one JSON line per image, read back into the shape `render` takes."""
    found = {}
    for line in log.read_text().splitlines():
        if not line.startswith("{") or '"pulls"' not in line:
            continue
        for image, figures in json.loads(line).items():
            pulls = {tuple(key.rsplit(" ", 1)): tries for key, tries in figures["pulls"].items()}
            found[image] = {**figures, "pulls": pulls}
    return found


if __name__ == "__main__":  # python -m bench.engines DIR [IMAGE ...]: this section alone, printed
    if sys.argv[1:2] == ["--from-log"]:
        print(render(from_log(Path(sys.argv[2]))))
    else:
        section_main(section, IMAGES)
