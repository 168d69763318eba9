"""Build rendered images layer by layer through a BuildKit docker client.

Each layer is built FROM the previous layer's image, tagged with its content-hash ref, so
a layer that several images share (one CUDA base under two torch versions) is built once
per run and comes from BuildKit's cache in later runs. Proxy and air-gap settings reach
the RUN steps as BuildKit secrets and bind mounts, never as files in a layer.
"""

from __future__ import annotations

import fcntl
import json
from importlib import metadata
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

from imagegen.engine import containers, progress
from imagegen.core import sizes
from imagegen.render import wheelhouse as wheel_index
from imagegen.engine.buildkit import BuildClient
from imagegen.core.errors import UserError
from imagegen.render.locked import LockedImage
from imagegen.render.contexts import LAYER_FILE_TIME, WHEELHOUSE, LayerContext, write_files
from imagegen.stages.provenance import CREATED_LABEL
from imagegen.stages.results import BuildResult, LayerResult

CA_BUNDLE_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")
CA_BUNDLE_TARGET = "/run/secrets/ca-bundle.crt"  # where templates mount the "ca-bundle" secret
LARGEST_PATHS = 10  # listed when an image is over its max_size


@dataclass(frozen=True)
class PipSettings:
    """How the installers inside the build reach packages: handed over as pip.conf and uv.toml secrets."""

    ca_bundle: Path | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    wheelhouse: Path | None = None

    def pip_conf(self) -> str:
        lines = ["[global]"]
        if self.index_url:
            lines.append(f"index-url = {self.index_url}")
        if self.extra_index_urls:
            lines.append("extra-index-url = " + " ".join(self.extra_index_urls))
        if self.wheelhouse:
            lines.append(f"find-links = {wheel_index.MOUNT}/{wheel_index.PIP_PAGE}")
        if self.ca_bundle:
            lines.append(f"cert = {CA_BUNDLE_TARGET}")
        return "\n".join(lines) + "\n"

    def uv_toml(self, wheelhouse_mount: str = wheel_index.MOUNT) -> str:
        lines = ["[pip]"]
        if self.index_url:
            lines.append(f"index-url = {json.dumps(self.index_url)}")
        extra = list(self.extra_index_urls)
        if self.wheelhouse:
            # uv takes a version from the first index that has it only with this strategy; with its default
            # a wheelhouse holding torch 2.14.1 would hide every other torch. --require-hashes keeps it safe.
            # A find-links directory would not do: uv prefers the index's copy of the same file.
            extra.insert(0, f"file://{wheelhouse_mount}/{wheel_index.UV_INDEX}")
            lines.append('index-strategy = "unsafe-first-match"')
        if extra:
            lines.append(f"extra-index-url = {json.dumps(extra)}")
        return "\n".join(lines) + "\n"

    @property
    def empty(self) -> bool:
        return not (self.ca_bundle or self.index_url or self.extra_index_urls or self.wheelhouse)


def detect_ca_bundle() -> Path | None:
    """The CA bundle the host trusts, as the usual variables name it."""
    for variable in CA_BUNDLE_VARS:
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    return None


def check_pip_settings(settings: PipSettings) -> None:
    if settings.ca_bundle and not settings.ca_bundle.is_file():
        raise UserError(f"--ca-bundle {settings.ca_bundle}: no such file; pass the PEM bundle your proxy's CA is in")
    if settings.wheelhouse and not settings.wheelhouse.is_dir():
        raise UserError(f"--wheelhouse {settings.wheelhouse}: not a directory of wheels")


def staging_root() -> Path:
    """Where build contexts are staged, at the same path every run.

    BuildKit keeps a copy of each context directory it was sent, keyed by the directory's
    path, and later sends only what changed. A stable path per layer keeps that to one
    copy of the wheelhouse per layer, instead of a new multi-GB copy per build.
    """
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "imagegen" / "contexts"


class Builder:
    """Builds images in order, remembering the layers this run already built."""

    def __init__(self, client: BuildClient, settings: PipSettings, log_dir: Path, view,
                 staging: Path | None = None, guides: dict[tuple[str, str], float] | None = None,
                 no_cache: bool = False):
        self.client = client
        self.no_cache = no_cache
        self.settings = settings
        self.log_dir = log_dir
        self.view = view  # progress.PlainView or TerminalView
        self.staging = staging or staging_root()
        self.guides = guides or {}  # (image, layer) -> seconds the last build took
        self.built_layers: dict[str, LayerResult] = {}
        self.failed_layers: dict[str, tuple[str | None, list[str]]] = {}  # ref -> (failed step, log tail)

    def build(self, image: LockedImage, contexts: list[LayerContext], labels: dict[str, str]) -> BuildResult:
        result = BuildResult(image=image.name, ref=image.ref(), status="built", platform=image.platform,
                             log_file=str(self.log_dir / f"{image.key}.log"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(result.log_file, "w") as log_file, self._secrets() as secrets:
            for context in contexts:
                final = context is contexts[-1]
                layer = self._build_layer(image, context, secrets, log_file, final, labels if final else {})
                result.layers.append(layer)
                result.duration_s += layer.duration_s
                if layer.status == "failed":
                    return self._failed(result, context)
            result.image_id = result.layers[-1].image_id
        result.size_bytes = containers.image_facts(result.image_id)["size"]
        if image.plan.max_size is not None and result.size_bytes > image.plan.max_size:
            return self._over_budget(result, image.plan.max_size)
        return result

    def _over_budget(self, result: BuildResult, budget: int) -> BuildResult:
        """The image stays tagged locally, to be inspected, but is neither tested nor pushed."""
        result.status = "failed"
        result.max_size = budget
        result.failed_step = (f"the image is {sizes.human(result.size_bytes)}, over its max_size "
                              f"{sizes.human(budget)}; raise max_size in the matrix or make the image smaller")
        result.largest_paths = [{"path": path, "bytes": size}
                                for path, size in containers.largest_files(result.image_id, LARGEST_PATHS)]
        return result

    def _failed(self, result: BuildResult, context: LayerContext) -> BuildResult:
        result.status = "failed"
        result.failed_layer = context.layer
        result.failed_step, result.log_tail = self.failed_layers[context.ref]
        if context.layer == "base":
            result.hint = missing_base_hint(base_of(context.dockerfile), result.log_tail) or ""
        return result

    def _build_layer(self, image: LockedImage, context: LayerContext, secrets: dict[str, Path],
                     log_file, final: bool, labels: dict[str, str]) -> LayerResult:
        if context.ref in self.built_layers and not final:
            return LayerResult(context.layer, context.ref, "reused", image_id=self.built_layers[context.ref].image_id)
        if context.ref in self.failed_layers:
            return LayerResult(context.layer, context.ref, "failed")
        def log(line: str) -> None:
            log_file.write(line + "\n")
            self.view.line(line)

        tags = [context.ref] + ([image.ref(tag) for tag in (image.version_tag, *image.alias_tags)] if final else [])
        self.view.start(f"{image.key} {context.layer}", f"building {tags[-1] if final else context.ref} with "
                        f"{self.client.why}", self.guides.get((image.key, context.layer)))
        with self._staged(image, context) as directory:
            outcome = self.client.build(directory, tags, log, labels=labels, secrets=secrets, on_step=self.view.step,
                                        no_cache=self.no_cache, platform=image.platform,
                                        build_args={"SOURCE_DATE_EPOCH": str(source_date_epoch(labels))})
        cached = f"{outcome.cached_steps}/{outcome.total_steps} steps cached"
        self.view.finish(f"{'built' if outcome.ok else 'FAILED'} in {progress.clock(outcome.duration_s)}, {cached}"
                         + ("" if outcome.ok else f", at: {outcome.failed_step}"))
        layer = LayerResult(context.layer, context.ref, "built" if outcome.ok else "failed", outcome.duration_s,
                            outcome.cached_steps, outcome.total_steps, outcome.image_id)
        if outcome.ok:
            self.built_layers[context.ref] = layer
        else:
            self.failed_layers[context.ref] = (outcome.failed_step, outcome.log_tail)
        return layer

    @contextmanager
    def _staged(self, image: LockedImage, context: LayerContext) -> Iterator[Path]:
        """The layer's context at its stable path: the rendered files, plus the wheelhouse
        when its install steps mount one. Locked, so two imagegen runs take turns."""
        directory = self.staging / context.layer
        directory.mkdir(parents=True, exist_ok=True)
        with open(self.staging / f".{context.layer}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for entry in directory.iterdir():
                if not (entry.name == WHEELHOUSE and context.mounts_wheelhouse):
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            write_files(directory, context.files)
            if context.mounts_wheelhouse:
                supported = wheel_index.supported_tags(image.versions["python"], image.plan.base.python_platform)
                wheel_index.sync(self.settings.wheelhouse, directory / WHEELHOUSE,
                                self.staging / ".wheelhouse-hashes.json", supported)
            yield directory

    def _secrets(self) -> "_PipSecrets":
        return _PipSecrets(self.settings)


class _PipSecrets:
    """The pip.conf, uv.toml and CA bundle secrets for one image's builds, removed afterwards."""

    def __init__(self, settings: PipSettings):
        self.settings = settings
        self.directory: str | None = None

    def __enter__(self) -> dict[str, Path]:
        if self.settings.empty:
            return {}
        self.directory = tempfile.mkdtemp(prefix="imagegen-secrets-")
        secrets = {}
        for name, text in (("pip.conf", self.settings.pip_conf()), ("uv.toml", self.settings.uv_toml())):
            secrets[name] = Path(self.directory) / name
            secrets[name].write_text(text)
            secrets[name].chmod(0o600)
        if self.settings.ca_bundle:
            secrets["ca-bundle"] = self.settings.ca_bundle
        return secrets

    def __exit__(self, *exc) -> None:
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def base_of(dockerfile: str) -> str:
    return next(line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM "))


def missing_base_hint(base: str, log_tail: list[str]) -> str | None:
    """What to do when a base pinned by digest is gone from its registry (tags NVIDIA deleted)."""
    if "@sha256:" not in base or not any(base in line and "not found" in line for line in log_tail):
        return None
    return (f"the base {base} is no longer in its registry: the registry dropped the digest the lock pins (its tag "
            "was deleted or moved upstream). Pass --base-image with a mirror that keeps that digest, or run "
            "`imagegen lock` for this image to pin what the tag holds now")


def source_date_epoch(labels: dict[str, str]) -> int:
    """The time BuildKit (0.11 and newer; 20.10's is older and ignores it) gives the image config and its history:
    the commit's, which the final layer's labels state, so that two builds of one commit have one config; the fixed
    LAYER_FILE_TIME for the layers below, whose image ids, unchanged from commit to commit, keep the next layer's
    build cache."""
    created = labels.get(CREATED_LABEL)
    return int(datetime.fromisoformat(created).timestamp()) if created else LAYER_FILE_TIME


def provenance_labels(repo: Path, client: BuildClient) -> dict[str, str]:
    """Where and how an image was made: source revision, time, builder.

    `created` is the source commit's time, as SOURCE_DATE_EPOCH is for reproducible builds: a
    wall-clock time would give every rebuild of unchanged source a new image id, so a pushed
    version tag could never be found "already published" again.
    """
    labels = {"io.imagegen.builder": f"imagegen {metadata.version('imagegen')} with {client.name}"}
    try:
        result = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%H %cI"], capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return labels
    if result.returncode == 0 and result.stdout.strip():
        revision, created = result.stdout.split()
        labels.update({"org.opencontainers.image.revision": revision, CREATED_LABEL: created})
    return labels
