"""Section 1: how much of the cpu image a rebuild reuses, as a share of a cold build's time."""

from __future__ import annotations

import shutil
from pathlib import Path

from .common import IMAGEGEN, REPO, docker, goal, run, table
from .cpu_image import CpuBuild, build_cpu, cpu_refs, layer_images, remove_images

NOOP_GOAL, TRAINER_GOAL = 0.05, 0.15
RESENT_FIX = ("Most of it is a build context sent in full again, the wheelhouse (about 3 GB) in it, while other "
              "layers' contexts holding the same wheelhouse go incrementally; the fix is in imagegen's staging "
              "(imagegen/build.py): keep that layer's context reusable by BuildKit, or leave the wheelhouse out of "
              "the trainer layer, whose dependencies the framework layer already installed.")
STEP_FIX = "The fix is a cheaper rebuilt step, e.g. `pip install --no-deps` for the trainer."
PACKAGE_CHANGE = ("peft: 0.21.2", "peft: 0.21.1")  # under defaults:, which the cpu image inherits
PACKAGE_FACTS = ('    "0.21.2": {python: ">=3.10", torch: ">=1.13"}\n', '    "0.21.1": {python: ">=3.10", torch: ">=1.13"}\n')


def make_cold() -> None:
    """No cpu or layer image and an empty BuildKit cache (cache mounts included)."""
    remove_images(cpu_refs() + layer_images())
    docker("builder", "prune", "-af")


def snapshot_inputs(work: Path) -> Path:
    """matrix.yaml, its locks, templates/ and trainer/ as they are now, so that edits others make to the
    working tree while this runs cannot change what the builds compare. contract/ is read from the repository:
    imagegen has no option naming it elsewhere."""
    inputs = work / "inputs"
    shutil.copytree(REPO / "trainer", inputs / "trainer", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "templates", inputs / "templates")
    shutil.copytree(REPO / "locks", inputs / "locks")
    shutil.copy(REPO / "matrix.yaml", inputs / "matrix.yaml")
    return inputs


def options(inputs: Path, matrix: Path | None = None, trainer: Path | None = None) -> list[str]:
    return ["--matrix", str(matrix or inputs / "matrix.yaml"), "--templates", str(inputs / "templates"),
            "--trainer", str(trainer or inputs / "trainer")]


def changed_trainer(inputs: Path) -> Path:
    """A copy of the trainer with one comment added to one module."""
    copy = inputs / "trainer-changed"
    shutil.copytree(inputs / "trainer", copy)
    with open(copy / "src" / "vlmgrpo" / "__init__.py", "a") as module:
        module.write("# bench: a trainer-only change\n")
    return copy


def changed_matrix(inputs: Path) -> tuple[Path, Path]:
    """A copy of matrix.yaml with one pinned ML package moved one release back (its facts added), and
    the cpu image locked again for it, as a user would: `imagegen lock` reads the index. The trainer's
    bound on that package starts at the release the matrix pins, so a copy of the trainer (beside it) allows
    the older one too. Returns (matrix, trainer)."""
    changed = inputs / "changed"
    shutil.copytree(inputs / "locks", changed / "locks")
    trainer = changed / "trainer"
    shutil.copytree(inputs / "trainer", trainer)
    project = (trainer / "pyproject.toml").read_text()
    bound = f'"{PACKAGE_CHANGE[0].replace(": ", ">=")},'
    assert project.count(bound) == 1, f"trainer/pyproject.toml: expected one {bound}"
    (trainer / "pyproject.toml").write_text(project.replace(bound, f'"{PACKAGE_CHANGE[1].replace(": ", ">=")},'))
    text = (inputs / "matrix.yaml").read_text()
    old, new = PACKAGE_CHANGE
    assert text.count(old) == 1, f"matrix.yaml: expected one '{old}'"
    facts = PACKAGE_FACTS
    assert text.count(facts[0]) == 1, f"matrix.yaml: expected one '{facts[0]}'"
    (changed / "matrix.yaml").write_text(text.replace(old, new).replace(facts[0], facts[0] + facts[1]))
    run([*IMAGEGEN, "lock", "--matrix", str(changed / "matrix.yaml"), "--trainer", str(trainer), "--image", "cpu"])
    return changed / "matrix.yaml", trainer


def measure(work: Path) -> list[CpuBuild]:
    """Cold, no-op, trainer-only and package-change builds, then the normal image restored."""
    inputs = snapshot_inputs(work)
    make_cold()
    builds = [build_cpu("cold", work, *options(inputs)), build_cpu("no change", work, *options(inputs))]
    builds.append(build_cpu("trainer code changed", work, *options(inputs, trainer=changed_trainer(inputs))))
    builds.append(build_cpu(f"{PACKAGE_CHANGE[0]} -> {PACKAGE_CHANGE[1].split()[1]}", work,
                            *options(inputs, *changed_matrix(inputs))))
    restored = build_cpu("restore", work)  # the cpu tags back on the working tree's image
    ours = {layer["ref"] for layer in restored.report["layers"]}
    remove_images(sorted({layer["ref"] for build in builds for layer in build.report["layers"]} - ours))
    return builds


def layer_steps(build: CpuBuild) -> str:
    return ", ".join(f"{layer['layer']} {layer['cached_steps']}/{layer['total_steps']}"
                     for layer in build.report["layers"])


def section(work: Path) -> str:
    builds = measure(work)
    cold, noop, trainer, package = builds
    rows = [(build.name, f"{build.wall_s:.1f}", f"{build.wall_s / cold.wall_s:.1%}",
             f"{build.report['duration_s']:.1f}", layer_times(build), layer_steps(build), contexts_sent(build))
            for build in builds]
    framework = trainer.layer("framework")
    framework_reused = framework["cached_steps"] == framework["total_steps"] > 0
    noop_ratio, trainer_ratio = noop.wall_s / cold.wall_s, trainer.wall_s / cold.wall_s
    lines = [
        "## 1. Build cache (cpu image)",
        "",
        "Each build is one `imagegen build --image cpu --base-image local/debian:bookworm --wheelhouse "
        ".cache/wheelhouse`, run in this order. Cold: the cpu and `imagegen-layer/*` images removed and "
        "`docker builder prune -af` (the apt and pip cache mounts go too). The builds use a copy of matrix.yaml, "
        "templates/ and trainer/ taken at the start. Wall: the whole command; build: the sum of the layers' "
        "`docker build` times in the report; steps: cached/total BuildKit steps per layer; context sent: what "
        "BuildKit reports transferring of each layer's build context, and how long it took.",
        "",
        table(("build", "wall s", "wall / cold", "build s", "build s per layer", "cached/total steps",
               "context sent (s)"), rows),
        "",
        f"- No-op rebuild: {noop_ratio:.1%} of cold (goal <= {NOOP_GOAL:.0%}: {goal(noop_ratio <= NOOP_GOAL)}).",
        f"- Trainer-only change: {trainer_ratio:.1%} of cold (goal <= {TRAINER_GOAL:.0%}: "
        f"{goal(trainer_ratio <= TRAINER_GOAL)}); framework layer "
        f"{'not rebuilt' if framework_reused else '**rebuilt**'} "
        f"({framework['cached_steps']}/{framework['total_steps']} steps cached).",
        f"- One pinned package changed (`{PACKAGE_CHANGE[0]}` -> `{PACKAGE_CHANGE[1]}` in the matrix defaults): "
        f"{package.wall_s / cold.wall_s:.1%} of cold.",
    ]
    lines += [miss for miss in (why_missed(noop, NOOP_GOAL, cold), why_missed(trainer, TRAINER_GOAL, cold)) if miss]
    return "\n".join(lines)


def layer_times(build: CpuBuild) -> str:
    return ", ".join(f"{layer['layer']} {layer['duration_s']:.1f}" for layer in build.report["layers"])


def contexts_sent(build: CpuBuild) -> str:
    return ", ".join(f"{layer} {size} ({seconds:.1f})" for layer, size, seconds in build.context_sends) or "-"


def why_missed(build: CpuBuild, target: float, cold: CpuBuild) -> str | None:
    """Where a rebuild that missed its goal spent its time, from the measured split."""
    if build.wall_s / cold.wall_s <= target:
        return None
    sending = sum(seconds for _, _, seconds in build.context_sends)
    slowest = max(build.report["layers"], key=lambda layer: layer["duration_s"])
    return (f"- Why '{build.name}' missed: {sending:.1f} s of its {build.wall_s:.1f} s went to sending build "
            f"contexts ({contexts_sent(build)}); the slowest layer, {slowest['layer']}, took "
            f"{slowest['duration_s']:.1f} s with {slowest['cached_steps']}/{slowest['total_steps']} steps cached; "
            f"{build.wall_s - build.report['duration_s']:.1f} s are imagegen's own (render, staging, inspect). "
            + (RESENT_FIX if sending >= build.wall_s / 2 else STEP_FIX))
