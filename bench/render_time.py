"""Section 4: rendering the whole matrix, in process per image and through the CLI."""

from __future__ import annotations

import time
from pathlib import Path

from .common import IMAGEGEN, run, table


def render_each() -> tuple[float, list[tuple[str, float]]]:
    """Seconds to load the plan (the matrix, its locks and the trainer, every locked image rendered once for its
    inputs digest), then seconds per locked image and platform to render its three layers again."""
    from imagegen.render import contexts as render
    from imagegen.workspace import Workspace

    started = time.perf_counter()
    workspace = Workspace()
    plan = workspace.load()
    setup = time.perf_counter() - started
    env = render.environment(workspace.templates)
    trainer = render.trainer_sources(workspace.trainer, workspace.contract)
    times = []
    for image in plan.locked.values():
        started = time.perf_counter()
        render.render_image(image.plan, image.lock, dict(image.versions), env, trainer)
        times.append((image.key, time.perf_counter() - started))
    return setup, times


def section(work: Path) -> str:
    setup, times = render_each()
    images = [option for name in dict.fromkeys(key.removesuffix("-arm64") for key, _ in times)
              for option in ("--image", name)]
    cli_s = run([*IMAGEGEN, "render", *images, "--out", str(work / "render")])
    rows = [(name, f"{seconds * 1000:.1f}") for name, seconds in times]
    return "\n".join([
        "## 4. Render",
        "",
        f"`imagegen render --image ... --out DIR` (the {len(times)} locked image x platform builds, 3 layers each): "
        f"**{cli_s:.2f} s** "
        f"wall, the CLI's start-up and writing the contexts included. In process: loading and validating the "
        f"matrix, reading its locks and the trainer source, and rendering every locked image once for its inputs "
        f"digest {setup * 1000:.1f} ms, then per image:",
        "",
        table(("image x platform", "render ms"), rows),
        "",
        f"- Mean {sum(t for _, t in times) / len(times) * 1000:.1f} ms per image.",
    ])
