"""Render planned images and their locks into build contexts: one per layer, a Dockerfile plus every
file it copies. Rendering is pure (plans, locks and templates in, bytes out); `write` is the only step
that touches the output directory, and it swaps a finished render into place atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from imagegen.core.errors import UserError
from imagegen.locking.lockfile import InstallStep, Lock, LockedPackage, install_steps
from imagegen.matrix import cuda_wheels
from imagegen.matrix.plan import PlannedImage
from imagegen.render import expected

LAYER_REPOSITORY = "imagegen-layer"
RENDER_MARKER = ".imagegen-render"
WHEELHOUSE = "wheelhouse"  # mounted into pip steps; filled at build time, empty in a render
EXECUTABLES = {"entrypoint.sh", "layer-shell.sh"}
LAYER_SHELL = "layer-shell.sh"  # the base layer's SHELL: what each RUN step writes gets LAYER_FILE_TIME
# The time the layer shell gives every file a RUN step writes. A fixed one, not the commit's: a time that changed
# with each commit would be an input of every step after it and rebuild each layer on each commit. 2000-01-01: ZIP,
# which wheels are, holds no time before 1980. Not the context files' time: BuildKit sends again only the files of a
# context whose size or time changed, so a file given a fixed time would go unsent when it changes at the same size.
LAYER_FILE_TIME = 946684800
COMPILE_PROBE = "compile-probe.sh"  # run before a source build: one file of torch's headers with the build's -std
WHEEL_NVCC = "nvidia-cuda-nvcc"  # CUDA 13's compiler as a wheel (CUDA 12's is nvidia-cuda-nvcc-cu12)
SOURCE_SKIP = {"tests", "__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache"}


@dataclass(frozen=True)
class RenderOptions:
    # Replaces the matrix's base: a mirror, a digest, a local image; per platform ("linux/arm64") or,
    # under "", for every platform.
    base_images: tuple[tuple[str, str], ...] = ()
    apt_mirror: str | None = None

    def base_image(self, platform: str) -> str | None:
        chosen = dict(self.base_images)
        return chosen.get(platform) or chosen.get("")

    @property
    def empty(self) -> bool:
        return not (self.base_images or self.apt_mirror)


@dataclass(frozen=True)
class LayerContext:
    """One layer's build context. `ref` names the layer image; its tag is a hash of the context,
    and every context names its parent's ref, so equal refs mean equal images."""

    image: str  # the image and platform (PlannedImage.key)
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


@dataclass(frozen=True)
class Renderer:
    """The templates and the sources the trainer layer installs (the trainer's and the contract's), read once, and the
    run's options."""

    env: jinja2.Environment
    sources: dict[str, bytes]
    options: RenderOptions = RenderOptions()

    @classmethod
    def of(cls, templates: Path, trainer_dir: Path, contract_dir: Path,
           options: RenderOptions = RenderOptions()) -> "Renderer":
        return cls(environment(templates), trainer_sources(trainer_dir, contract_dir), options)

    def render(self, plan: PlannedImage, lock: Lock, versions: dict) -> tuple[list[LayerContext], list[LayerContext]]:
        """(the layers to build, the layers as the matrix's own base would make them). The second names the
        image: a mirror or a local base (--base-image, --apt-mirror) builds the same inputs, under the same tag."""
        identity = render_image(plan, lock, versions, self.env, self.sources)
        if self.options.empty:
            return identity, identity
        return render_image(plan, lock, versions, self.env, self.sources, self.options), identity


def render_image(plan: PlannedImage, lock: Lock, versions: dict, env: jinja2.Environment,
                 sources: dict[str, bytes], options: RenderOptions = RenderOptions()) -> list[LayerContext]:
    """The image's layers, base first, each FROM the one before."""
    base_image = options.base_image(plan.platform) or lock.base.pinned_ref
    shared = {"image": plan, "versions": versions, "expected_path": expected.PATH}
    nvcc = lock.package(WHEEL_NVCC)
    cuda_home = wheel_cuda_home(plan, nvcc)
    has_nvcc = plan.has_toolkit or cuda_home is not None
    layer_shell = env.get_template(LAYER_SHELL).render(file_time=LAYER_FILE_TIME).encode()
    base = _layer(plan, "base", base_image, env, {LAYER_SHELL: layer_shell}, **shared, apt_mirror=options.apt_mirror, base_image=base_image,
                  compilers=plan.compiles_kernels if has_nvcc else ())
    # cuDNN and NCCL (the lock families of the components torch decides) install in a step of their own after the
    # CUDA release's libraries, so that no layer holds over half of the image: a pull fetches layers side by side and
    # unpacks one while the next downloads.
    steps = install_steps(lock, bool(versions.get("deepspeed")), plan.kernels.flash_attn_source_build,
                          tuple(plan.components.torch_families.values()), extra_roots=plan.trainer.extra_roots)
    framework_files = _framework_files(plan, versions, steps)
    if plan.kernels.flash_attn_source_build:
        framework_files[COMPILE_PROBE] = template_file(env, COMPILE_PROBE)
    framework = _layer(plan, "framework", base.ref, env, framework_files, **shared,
                       steps=steps, step_environment=_step_environment(plan), cuda_home=cuda_home,
                       nvcc=nvcc, toolkit=lock.package(cuda_wheels.TOOLKIT), cuda_wheels_home=cuda_wheels.CUDA_HOME,
                       cuda_major=nvcc.version.split(".")[0] if nvcc else None)
    trainer_context = dict(sources)
    trainer_context["entrypoint.sh"] = template_file(env, "entrypoint.sh")
    trainer = _layer(plan, "trainer", framework.ref, env, trainer_context, **shared)
    return [base, framework, trainer]


def template_file(env: jinja2.Environment, name: str) -> bytes:
    """A file the templates folder holds beside the Dockerfile templates, copied into a context as it is."""
    path = Path(env.loader.searchpath[0]) / name
    try:
        return path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: {error.strerror}; the templates folder needs it (restore it from imagegen's "
                        "templates/)") from None


def wheel_cuda_home(plan: PlannedImage, nvcc: LockedPackage | None) -> str | None:
    """Without an nvidia/cuda base, the CUDA toolkit the lock's nvcc wheel brings: CUDA 13's nvidia-cuda-nvcc puts
    nvcc, its headers and libraries under one site-packages/nvidia/cu<major> folder, a CUDA_HOME for torch's
    cpp_extension and FlashInfer. None with an nvidia/cuda base (its toolkit is /usr/local/cuda) or without that wheel
    (CUDA 12's ship no nvcc: imagegen.matrix.cuda_wheels)."""
    if plan.gpu.cuda_source == "base" or nvcc is None:
        return None
    python = ".".join(plan.version("python").split(".")[:2])
    return f"/opt/venv/lib/python{python}/site-packages/nvidia/cu{nvcc.version.split('.')[0]}"


def _layer(plan: PlannedImage, layer: str, parent: str, env: jinja2.Environment, files: dict[str, bytes],
           **variables) -> LayerContext:
    try:
        dockerfile = env.get_template(f"{layer}.Dockerfile.j2").render(parent=parent, **variables)
    except jinja2.TemplateError as exc:
        where = f"{exc.filename}:{exc.lineno}" if getattr(exc, "lineno", None) else f"{layer}.Dockerfile.j2"
        raise UserError(f"{where}: template error while rendering {plan.key}: {exc.message}") from None
    files = {"Dockerfile": dockerfile.encode(), **files}
    return LayerContext(plan.key, layer, files, _digest(files), parent)


# What is rendered is what the inputs digest covers: nothing here may depend on where the matrix lives.
LOCK_HEADER = "# {image}: every Python distribution imagegen installed, as locks/{image}.json pins them.\n"


def required_cuda(dockerfile: str) -> str | None:
    """The NVIDIA_REQUIRE_CUDA a rendered base layer sets, as written; None where it sets none."""
    match = re.search(r'\bNVIDIA_REQUIRE_CUDA="([^"]*)"', dockerfile)
    return match.group(1) if match else None


def _framework_files(plan: PlannedImage, versions: dict, steps: list[InstallStep]) -> dict[str, bytes]:
    files = {path: "".join(f"{line}\n" for line in lines).encode()
             for step in steps for path, lines in step.files().items()}
    every_line = [line for step in steps for lines in step.files().values() for line in lines]
    header = LOCK_HEADER.format(image=plan.name)
    files["requirements.lock"] = (header + "".join(f"{line}\n" for line in every_line)).encode()
    files["expected.json"] = expected.of_plan(plan, versions).text().encode()
    return files


def _step_environment(plan: PlannedImage) -> dict[str, str]:
    """What compiling each step's sources needs; no GPU is visible in a build, so the
    architectures come from TORCH_CUDA_ARCH_LIST."""
    arch = f'TORCH_CUDA_ARCH_LIST="{plan.kernels.arch_list}"'
    deepspeed_ops = " ".join(f"DS_BUILD_{op.upper()}=1" for op in plan.kernels.deepspeed_ops)
    return {
        "flash-attn": f'MAX_JOBS="$MAX_JOBS" {arch} FLASH_ATTENTION_FORCE_BUILD=TRUE',
        "deepspeed": f"{arch} {deepspeed_ops}" if plan.kernels.deepspeed_ops else "DS_BUILD_OPS=0",
    }


def _digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return digest.hexdigest()


def trainer_sources(trainer_dir: Path, contract_dir: Path) -> dict[str, bytes]:
    """What the trainer layer installs, by its path in the context: the trainer's source (trainer/...) and the
    contract's (contract/...), the distribution the trainer requires that no index holds."""
    if not (trainer_dir / "pyproject.toml").is_file():
        raise UserError(f"{trainer_dir}: no trainer distribution here (pyproject.toml missing); "
                        "pass --trainer DIR")
    if not (contract_dir / "pyproject.toml").is_file():
        raise UserError(f"{contract_dir}: no contract distribution here (pyproject.toml missing): the trainer requires "
                        "it; run imagegen in a checkout of its repository, or set IMAGEGEN_REPO to one")
    return {f"{folder}/{path}": data for folder, source in (("trainer", trainer_dir), ("contract", contract_dir))
            for path, data in source_files(source).items()}


def source_files(source_dir: Path) -> dict[str, bytes]:
    """A distribution's source tree as the image needs it: no tests, caches or build output."""
    files = {}
    for root, dirs, names in os.walk(source_dir):
        dirs[:] = sorted(d for d in dirs if d not in SOURCE_SKIP and not d.endswith(".egg-info")
                         and not d.startswith("."))
        for name in sorted(names):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(root, name)
            files[path.relative_to(source_dir).as_posix()] = path.read_bytes()
    return files


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if path in EXECUTABLES:
            target.chmod(0o755)
