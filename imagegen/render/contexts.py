"""Render image specs into build contexts: one directory per layer, Dockerfile plus every file
it copies. Rendering is pure (specs and templates in, bytes out); `write` is the only step
that touches the output directory, and it swaps a finished render into place atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import jinja2

from imagegen.core import atomic
from imagegen.core.errors import UserError
from imagegen.locking.lockfile import InstallStep, install_steps
from imagegen.matrix.plan import ImageSpec

LAYERS = ("base", "framework", "trainer")
LAYER_REPOSITORY = "imagegen-layer"
RENDER_MARKER = ".imagegen-render"
WHEELHOUSE = "wheelhouse"  # mounted into pip steps; filled at build time, empty in a render
EXECUTABLES = {"entrypoint.sh"}
TRAINER_SKIP = {"tests", "__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache"}


@dataclass(frozen=True)
class RenderOptions:
    # Replaces the matrix's base: a mirror, a digest, a local image; per platform ("linux/arm64") or,
    # under "", for every platform.
    base_images: tuple[tuple[str, str], ...] = ()
    apt_mirror: str | None = None

    def base_image(self, platform: str) -> str | None:
        chosen = dict(self.base_images)
        return chosen.get(platform) or chosen.get("")


@dataclass(frozen=True)
class LayerContext:
    """One layer's build context. `ref` names the layer image; its tag is a hash of the context,
    and every context names its parent's ref, so equal refs mean equal images."""

    image: str  # the image and platform (ImageSpec.key)
    layer: str
    files: dict[str, bytes]
    digest: str  # of the files, its Dockerfile naming the parent's ref: a layer's digest covers all below
    parent: str

    @property
    def ref(self) -> str:
        return f"{LAYER_REPOSITORY}/{self.layer}:{self.digest[:16]}"

    @property
    def dockerfile(self) -> str:
        return self.files["Dockerfile"].decode()

    @property
    def mounts_wheelhouse(self) -> bool:
        return f"source={WHEELHOUSE}" in self.dockerfile


def environment(templates: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_image(spec: ImageSpec, env: jinja2.Environment, trainer_files: dict[str, bytes],
                 options: RenderOptions = RenderOptions()) -> list[LayerContext]:
    """The image's layers, base first, each FROM the one before. The spec must have its lock."""
    if spec.lock is None:
        raise UserError(f"{spec.key}: {spec.lock_problem}")
    base_image = options.base_image(spec.platform) or spec.lock.base.pinned_ref
    base = _layer(spec, "base", base_image, env, {}, apt_mirror=options.apt_mirror, base_image=base_image)
    steps = install_steps(spec.lock, bool(spec.deepspeed), spec.flash_attn_source_build)
    framework = _layer(spec, "framework", base.ref, env, _framework_files(spec, steps), steps=steps,
                       step_environment=_step_environment(spec))
    trainer_context = {f"trainer/{path}": data for path, data in trainer_files.items()}
    trainer_context["entrypoint.sh"] = (Path(env.loader.searchpath[0]) / "entrypoint.sh").read_bytes()
    trainer = _layer(spec, "trainer", framework.ref, env, trainer_context)
    return [base, framework, trainer]


def render_specs(templates: Path, trainer_dir: Path, specs: list[ImageSpec],
                 options: RenderOptions = RenderOptions()) -> dict[str, list[LayerContext]]:
    """Every spec's layers, by image and platform (ImageSpec.key), with the trainer source read once."""
    env = environment(templates)
    trainer = trainer_files(trainer_dir)
    return {spec.key: render_image(spec, env, trainer, options) for spec in specs}


def _layer(spec: ImageSpec, layer: str, parent: str, env: jinja2.Environment, files: dict[str, bytes],
           **variables) -> LayerContext:
    try:
        dockerfile = env.get_template(f"{layer}.Dockerfile.j2").render(spec=spec, parent=parent, **variables)
    except jinja2.TemplateError as exc:
        where = f"{exc.filename}:{exc.lineno}" if getattr(exc, "lineno", None) else f"{layer}.Dockerfile.j2"
        raise UserError(f"{where}: template error while rendering {spec.key}: {exc.message}") from None
    files = {"Dockerfile": dockerfile.encode(), **files}
    return LayerContext(spec.key, layer, files, _digest(files), parent)


def inputs_digest(layers: list[LayerContext]) -> str:
    """One digest of everything an image is built from: its layers' files (the lock's requirements,
    every Dockerfile with its base's locked digest, the trainer's source)."""
    digest = hashlib.sha256()
    for layer in layers:
        digest.update(f"{layer.layer}\0{layer.digest}\0".encode())
    return f"sha256:{digest.hexdigest()}"


# What is rendered is what the inputs digest covers: nothing here may depend on where the matrix lives.
LOCK_HEADER = "# {image}: every Python distribution imagegen installed, as locks/{image}.json pins them.\n"


def _framework_files(spec: ImageSpec, steps: list[InstallStep]) -> dict[str, bytes]:
    files = {path: "".join(f"{line}\n" for line in lines).encode()
             for step in steps for path, lines in step.files().items()}
    every_line = [line for step in steps for lines in step.files().values() for line in lines]
    header = LOCK_HEADER.format(image=spec.name)
    files["requirements.lock"] = (header + "".join(f"{line}\n" for line in every_line)).encode()
    files["expected.json"] = (json.dumps(spec.expected(), indent=2, sort_keys=True) + "\n").encode()
    return files


def _step_environment(spec: ImageSpec) -> dict[str, str]:
    """What compiling each step's sources needs; no GPU is visible in a build, so the
    architectures come from TORCH_CUDA_ARCH_LIST."""
    arch = f'TORCH_CUDA_ARCH_LIST="{spec.cuda_arch_list}"'
    deepspeed_ops = " ".join(f"DS_BUILD_{op.upper()}=1" for op in spec.deepspeed_ops)
    return {
        "flash-attn": f'MAX_JOBS="$MAX_JOBS" {arch} FLASH_ATTENTION_FORCE_BUILD=TRUE',
        "deepspeed": f"{arch} {deepspeed_ops}" if spec.deepspeed_ops else "DS_BUILD_OPS=0",
    }


def _digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()


def trainer_files(trainer_dir: Path) -> dict[str, bytes]:
    """The trainer's source tree as the image needs it: no tests, caches or build output."""
    if not (trainer_dir / "pyproject.toml").is_file():
        raise UserError(f"{trainer_dir}: no trainer distribution here (pyproject.toml missing); "
                        "pass --trainer DIR")
    files = {}
    for root, dirs, names in os.walk(trainer_dir):
        dirs[:] = sorted(d for d in dirs if d not in TRAINER_SKIP and not d.endswith(".egg-info")
                         and not d.startswith("."))
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(root, name)
            files[path.relative_to(trainer_dir).as_posix()] = path.read_bytes()
    return files


def write(out: Path, contexts: list[LayerContext], specs: list[ImageSpec]) -> None:
    """Write every context under OUT/<image>/<layer>/, replacing an earlier render whole.

    The new render is assembled in a temporary sibling directory and renamed into place,
    so a failure leaves the previous output (or nothing) behind, never half a render.
    """
    if out.exists() and not (out / RENDER_MARKER).exists() and any(out.iterdir()):
        raise UserError(f"{out}: exists and is not an imagegen render; choose an empty or new --out")
    with atomic.replaced_directory(out) as staging:
        _write_tree(staging, contexts, specs)


def _write_tree(root: Path, contexts: list[LayerContext], specs: list[ImageSpec]) -> None:
    (root / RENDER_MARKER).write_text("rendered by imagegen; replaced whole by the next render\n")
    for context in contexts:
        directory = root / context.image / context.layer
        write_files(directory, context.files)
        if context.mounts_wheelhouse:
            (directory / WHEELHOUSE).mkdir(exist_ok=True)
    for spec in specs:
        layers = {c.layer: c.ref for c in contexts if c.image == spec.key}
        description = {"spec": spec.as_dict(), "layers": layers}
        (root / spec.key / "image.json").write_text(json.dumps(description, indent=2, sort_keys=True) + "\n")


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if path in EXECUTABLES:
            target.chmod(0o755)
