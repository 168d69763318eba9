"""Section 4: rendering the whole matrix, in process per image and through the CLI."""

from __future__ import annotations

import time
from pathlib import Path

from .common import IMAGEGEN, run, table


def render_each() -> tuple[float, list[tuple[str, float]]]:
    """Seconds to load the matrix, its locks and the trainer, then seconds per locked image to render its
    three layers (an image without a lock cannot be rendered)."""
    from imagegen.render import contexts as render
    from imagegen.workspace import Workspace

    started = time.perf_counter()
    workspace = Workspace()
    _, specs = workspace.load()
    env = render.environment(workspace.templates)
    trainer = render.trainer_files(workspace.trainer)
    setup = time.perf_counter() - started
    times = []
    for spec in (spec for spec in specs if spec.lock):
        started = time.perf_counter()
        render.render_image(spec, env, trainer)
        times.append((spec.name, time.perf_counter() - started))
    return setup, times


def section(work: Path) -> str:
    setup, times = render_each()
    images = [option for name, _ in times for option in ("--image", name)]
    cli_s = run([*IMAGEGEN, "render", *images, "--out", str(work / "render")])
    rows = [(name, f"{seconds * 1000:.1f}") for name, seconds in times]
    return "\n".join([
        "## 4. Render",
        "",
        f"`imagegen render --image ... --out DIR` (the {len(times)} locked images, 3 layers each): **{cli_s:.2f} s** "
        f"wall, the CLI's start-up and writing the contexts included. In process: loading and validating the "
        f"matrix, reading its locks and the trainer source, and rendering every locked image once for its inputs "
        f"digest {setup * 1000:.1f} ms, then per image:",
        "",
        table(("image", "render ms"), rows),
        "",
        f"- Mean {sum(t for _, t in times) / len(times) * 1000:.1f} ms per image.",
    ])
