"""`imagegen lock`: resolve each image's whole Python stack from the index, with hashes, into
locks/<image>.json, and pin its base image's tag to the digest the registry gives now.

The resolver is uv's `pip compile`: it resolves for a Python version and platform other than
the host's (--python-version, --python-platform) from index metadata alone, so a multi-GB stack
resolves in about a second without downloading a wheel, and its errors name the package and the
constraint that conflict. flash-attn has no metadata an index can give without building it
against torch, so it is locked as an artifact: its wheel's URL or its sdist, with the sha256
its host publishes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name

from imagegen_contract import atomic
from imagegen.core.platforms import MACHINE
from imagegen.locking import index, requires
from imagegen.locking.inputs import flash_attn_requirement, lock_inputs
from imagegen.matrix.plan import PYPI, PlannedImage
from imagegen.core.errors import UserError
from imagegen.locking.lockfile import Artifact, BasePin, Lock, LockedPackage, dumps
from imagegen.engine.registry.http import RegistryError, tag_digest

UV_TIMEOUT_S = 600
GITHUB_API = "https://api.github.com/repos/Dao-AILab/flash-attention/releases/tags/v{version}"
FLASH_ATTN_SDIST = "flash_attn-{version}.tar.gz"
_UV_DECORATION = re.compile(r"^[\s│╰─▶×]+")


class LockError(UserError):
    """An image that cannot be locked; the message says why in a few lines."""


@dataclass(frozen=True)
class LockOutcome:
    lock: Lock
    warnings: tuple[str, ...]


UNHASHED_NOTE = ("its host did not answer where this lock was made: `imagegen build` refuses it unless told "
                 "--allow-unhashed")
UNPINNED_NOTE = "its registry did not answer where this lock was made: the build goes FROM the tag as it is that day"


def lock_image(plan: PlannedImage, command: str) -> LockOutcome:
    """Resolve one platform of an image; LockError when its stack does not resolve or an index does not answer."""
    inputs = lock_inputs(plan)
    packages = with_requires(resolve(plan, inputs["requirements"]), plan)
    base, unpinned = pin_base(plan.base.image)
    flash_attn, unhashed = flash_attn_artifact(plan)
    warnings = [text for text in (unpinned, unhashed) if text]
    lock = Lock(plan.name, plan.platform, inputs, base, tuple(packages), flash_attn, command)
    return LockOutcome(lock, tuple(warnings))


def resolve(plan: PlannedImage, requirements: list[str]) -> list[LockedPackage]:
    argv = [_uv(), "pip", "compile", "-", "--python-version", plan.version("python"), "--python-platform",
            plan.base.python_platform, "--generate-hashes", "--emit-index-annotation", "--no-header",
            "--annotation-style", "split", "--quiet"]
    if plan.torch.index_url:
        # An extra index is searched first: torch and its CUDA wheels come from the PyTorch index.
        argv += ["--extra-index-url", plan.torch.index_url]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
    try:
        done = subprocess.run(argv, input="\n".join(requirements) + "\n", capture_output=True, text=True, env=env,
                              timeout=UV_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LockError(f"uv did not resolve within {UV_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise LockError(_uv_reason(done.stderr, plan.torch.index_url))
    return parse_compiled(done.stdout)


def with_requires(packages: list[LockedPackage], plan: PlannedImage) -> list[LockedPackage]:
    """Each package with what its index's metadata says it requires, so the lock's graph can be checked."""
    try:
        found = requires.read_requires(packages, plan.version("python"), MACHINE[plan.platform])
    except index.PackageIndexError as error:
        raise LockError(f"the index did not give a locked package's metadata: {error}") from None
    return [replace(package, requires=found[package.name]) for package in packages]


def _uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def parse_compiled(text: str) -> list[LockedPackage]:
    """uv's requirements output (hashes, `# via` and `# from` annotations) as locked packages."""
    packages: list[LockedPackage] = []
    current: dict | None = None
    in_via = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not raw.startswith((" ", "#")):
            if current:
                packages.append(_package(current))
            name, _, version = line.rstrip("\\ ").partition("==")
            current = {"name": canonicalize_name(name), "version": version.strip(), "hashes": [], "via": [],
                       "index": None}
            in_via = False
        elif current is None:
            continue
        elif line.startswith("--hash="):
            current["hashes"].append(line.removeprefix("--hash=").rstrip("\\ "))
        elif line == "# via":
            in_via = True
        elif line.startswith("# via "):
            current["via"].append(line.removeprefix("# via "))
        elif line.startswith("# from "):
            current["index"] = line.removeprefix("# from ")
            in_via = False
        elif in_via and line.startswith("#   "):
            current["via"].append(line.removeprefix("#").strip())
    if current:
        packages.append(_package(current))
    return packages


def _package(entry: dict) -> LockedPackage:
    parents = sorted({canonicalize_name(v.split()[0]) for v in entry["via"] if not v.startswith("-")})
    return LockedPackage(entry["name"], entry["version"], tuple(entry["hashes"]), entry["index"], tuple(parents))


def _uv_reason(stderr: str, torch_index: str | None) -> str:
    """uv's error in a few plain lines; an index that did not answer, in one."""
    lines = [_UV_DECORATION.sub("", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith("warning:")]
    text = " ".join(lines)
    unreachable = ("error sending request", "dns error", "Failed to fetch", "Could not connect", "timed out")
    if any(marker in text for marker in unreachable):
        url = re.search(r"https?://[^\s`'\"]+", text)
        where = torch_index if torch_index and torch_index in text else (url.group(0) if url else "the index")
        return f"cannot reach {where}: the index did not answer ({lines[-1] if lines else 'no reason given'})"
    kept = [line.removeprefix("error: ").removeprefix("cause: ") for line in lines if not line.startswith("hint:")]
    return "no resolution: " + " ".join(kept[:6])


def pin_base(ref: str) -> tuple[BasePin, str]:
    """The base tag's digest now, or unpinned where its registry does not answer: the lock says so without this
    machine's error (a DNS message is about where the lock was made, not about the image); the warning, printed
    when locking, gives it."""
    try:
        return BasePin(ref, tag_digest(ref)), ""
    except RegistryError as error:
        return BasePin(ref, None, UNPINNED_NOTE), f"base {ref} not pinned: {error}"


def flash_attn_artifact(plan: PlannedImage) -> tuple[Artifact | None, str]:
    """flash-attn's artifact with its sha256, or without where its host does not answer: as pin_base, the lock says
    so without this machine's error, which the warning gives."""
    requirement = flash_attn_requirement(plan)
    if requirement is None:
        return None, ""
    if plan.kernels.flash_attn_source_build:
        return Artifact(requirement, _sdist_sha256(plan.version("flash_attn"))), ""
    filename = plan.kernels.flash_attn_wheel_url.rsplit("/", 1)[-1]
    try:
        return Artifact(requirement, _release_asset_sha256(plan.version("flash_attn"), filename)), ""
    except LockError:
        raise
    except UserError as error:
        return Artifact(requirement, None, UNHASHED_NOTE), f"flash-attn wheel not hashed: {error}"


def _sdist_sha256(version: str) -> str:
    wanted = FLASH_ATTN_SDIST.format(version=version)
    try:
        files = index.project_files(PYPI, "flash-attn")
    except index.PackageIndexError as error:
        raise LockError(str(error)) from None
    found = next((f for f in files if f.filename == wanted), None)
    if found is None or not found.sha256:
        raise LockError(f"PyPI has no {wanted}: flash-attn {version} cannot be built from source")
    return found.sha256


def _release_asset_sha256(version: str, filename: str) -> str:
    """The digest GitHub publishes for a release asset."""
    url = GITHUB_API.format(version=version)
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.github+json"})
    try:
        with urllib.request.urlopen(request, timeout=index.HTTP_TIMEOUT_S) as response:
            release = json.load(response)
    except urllib.error.HTTPError as error:
        raise UserError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        raise UserError(f"cannot reach api.github.com: {getattr(error, 'reason', error)}") from None
    asset = next((a for a in release.get("assets", []) if a.get("name") == filename), None)
    if asset is None:
        raise LockError(f"flash-attn v{version} on GitHub has no {filename}: correct flash_attn in the matrix, "
                        "or build it from source")
    digest = asset.get("digest") or ""
    if not digest.startswith("sha256:"):
        raise UserError(f"GitHub publishes no sha256 for {filename}")
    return digest.removeprefix("sha256:")


def write_locks(path: Path, locks: list[Lock]) -> None:
    """One image's lock file, every platform in it."""
    atomic.write_text(path, dumps(locks))


def summary(lock: Lock, families: Iterable[str]) -> str:
    """One line: the platform, how many packages, torch and the wheels of its families (Components.torch_families:
    cuDNN, NCCL), the base pin."""
    named = [p for p in lock.packages if p.name == "torch" or p.name.startswith(tuple(families))]
    pins = ", ".join(f"{p.name} {p.version}" for p in named)
    base = f"base {lock.base.ref}@{lock.base.digest}" if lock.base.digest else f"base {lock.base.ref} (unpinned)"
    return f"{lock.platform}: {len(lock.packages)} packages ({pins}); {base}"
