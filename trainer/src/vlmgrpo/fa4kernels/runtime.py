"""Where a run's FlashAttention 4 kernels come from: the image's cache (build.py) where it holds this GPU's, else
compiled at the first step; either way kept in one writable cache that every rank of the run shares.

FA4 reads one cache directory (flash_attn/cute/cache_utils.py: FLASH_ATTENTION_CUTE_DSL_CACHE_DIR), and must be able to
create lock files in it: a read-only one fails at the first backward kernel it lacks. So the image's kernels for
this GPU (its architecture and SM count, a directory of the image's cache each) are copied into the run's cache
(a few MB), under the run's output unless FLASH_ATTENTION_CUTE_DSL_CACHE_DIR names another, before FA4 is imported
(it reads the variables at import). Kernels the image lacks (another GPU, another model's shapes) are compiled by FA4
at first use and written there: the next run, or a restarted one, loads them.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Optional

from vlmgrpo.fa4kernels import build

log = logging.getLogger("vlmgrpo")

KERNELS_VARIABLE = "VLMGRPO_FA4_KERNELS"  # set by the image (templates/trainer.Dockerfile.j2): the cache build.py made
CACHE_ENABLED, CACHE_DIR = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR"  # FA4's own
RUN_CACHE = ".fa4-kernels"  # under the run's output: one directory per GPU kind, as in the image


def manifest(environ: Mapping[str, str] = os.environ) -> Optional[dict]:
    """The image's manifest.json (build.py), or None where the image has no kernels."""
    root = environ.get(KERNELS_VARIABLE)
    if not root:
        return None
    try:
        return json.loads((Path(root) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def changed_sources(shipped: dict) -> list[str]:
    """FA4's source files (those its fingerprint covers) that differ from the ones the image's kernels were compiled
    from: a changed, added or removed file gives the cache another fingerprint, so FA4 would find none of them."""
    spec = importlib.util.find_spec("flash_attn.cute")
    if spec is None or not spec.origin:
        return ["flash_attn/cute (not installed)"]
    installed, recorded = build.source_digests(), shipped.get("sources", {})
    return [f"flash_attn/cute/{name}" for name in sorted(set(installed) | set(recorded))
            if installed.get(name) != recorded.get(name)]


def shipped_gpu(shipped: Optional[dict], sm: int, sms: int) -> Optional[tuple[str, dict]]:
    """The image's GPU entry compiled for this architecture and SM count, or None."""
    for name, gpu in sorted(((shipped or {}).get("gpus") or {}).items()):
        if gpu.get("sm") == sm and gpu.get("sms") == sms:
            return name, gpu
    return None


def kinds(shipped: Optional[dict]) -> str:
    gpus = (shipped or {}).get("gpus") or {}
    return ", ".join(f"{name} (sm{gpu['sm']}, {gpu['sms']} SMs)" for name, gpu in sorted(gpus.items())) or "none"


def run_cache(output_dir: str, sm: int, sms: int, environ: Mapping[str, str] = os.environ) -> Path:
    """The writable cache of this run on this GPU kind: the one the user named, else under the run's output."""
    if environ.get(CACHE_DIR):
        return Path(environ[CACHE_DIR])
    return Path(output_dir) / RUN_CACHE / f"sm{sm}-{sms}sms"


def seed(source: Path, cache: Path) -> int:
    """Copy the image's kernels into the run's cache, each file once (ranks that start together each write a
    temporary name, then rename): how many were copied."""
    copied = 0
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = cache / path.relative_to(source)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(path, temporary)
        os.replace(temporary, target)
        copied += 1
    return copied


def plan(output_dir: str, sm: int, sms: int, shipped: Optional[dict], changed: list[str],
         environ: Mapping[str, str] = os.environ) -> tuple[Path, Optional[Path], str]:
    """(the run's cache, the image's directory to seed it from or None, the line that says so); changed: FA4's
    files that differ from those the image's kernels were compiled from (changed_sources)."""
    cache = run_cache(output_dir, sm, sms, environ)
    found = shipped_gpu(shipped, sm, sms)
    gpu = f"sm{sm} with {sms} SMs"
    if shipped is None:
        return cache, None, (f"flash-attention 4 kernels: none in this image ({KERNELS_VARIABLE} names no cache): "
                             f"compiled for this GPU ({gpu}) at the first step and kept in {cache}")
    if found is None:
        return cache, None, (f"flash-attention 4 kernels: the image has none for this GPU ({gpu}; it has "
                             f"{kinds(shipped)}): compiled at the first step and kept in {cache}, where the next "
                             "run finds them")
    if changed:
        return cache, None, (f"flash-attention 4 kernels: the image's were compiled from other FA4 sources "
                             f"({changed[0]} differs{f', and {len(changed) - 1} more' if len(changed) > 1 else ''}): "
                             f"compiled for this GPU ({gpu}) at the first step and kept in {cache}")
    name, entry = found
    source = Path(environ[KERNELS_VARIABLE]) / entry["directory"]
    return cache, source, (f"flash-attention 4 kernels: from the image for this GPU ({gpu}: {name}, {entry['keys']} "
                           f"kernels); any other is compiled at first use and kept in {cache}")


def model_family(config) -> dict:
    """A transformers model config as targets.json describes a family: its text model's heads (its text_config for
    a vision-language model) and its vision tower's, with the tokens of a window where it attends in windows."""
    text = getattr(config, "text_config", None) or config
    family = {"text": {"hidden_size": text.hidden_size, "num_attention_heads": text.num_attention_heads,
                       "num_key_value_heads": getattr(text, "num_key_value_heads", None) or text.num_attention_heads}}
    if getattr(text, "head_dim", None):
        family["text"]["head_dim"] = text.head_dim
    vision = getattr(config, "vision_config", None)
    heads = getattr(vision, "num_heads", None)
    width = getattr(vision, "hidden_size", None) or getattr(vision, "embed_dim", None)
    if heads and width:
        family["vision"] = {"hidden_size": width, "num_heads": heads}
        window, patch = getattr(vision, "window_size", None), getattr(vision, "patch_size", None)
        if window and patch:
            family["vision"]["window_tokens"] = (window // patch) ** 2
    return family


def missing_cases(family: dict, shipped: Optional[dict], seeded: bool) -> list[tuple]:
    """The model's attention calls (build.case_key) that the image's kernels for this GPU do not cover."""
    defaults = json.loads(build.TARGETS.read_text())["shapes"]
    have = {tuple(build.case_key(case)) for case in (shipped or {}).get("cases", [])} if seeded else set()
    return [build.case_key(case) for case in build.cases({"model": family}, defaults)
            if build.case_key(case) not in have]


def run_targets(sm: int, sms: int, family: dict) -> dict:
    """targets.json for one run: its model on its GPU, over the image's shapes, into the run's cache itself."""
    return {"families": {"model": family}, "shapes": json.loads(build.TARGETS.read_text())["shapes"],
            "gpus": {"this GPU": {"sm": sm, "target": f"sm_{sm}a", "sms": sms, "directory": "."}}}


def compiled_mark(cache: Path, targets: dict) -> Path:
    """The file the compiling rank leaves once these targets are in the cache."""
    return cache / f".vlmgrpo-compiled-{hashlib.sha256(json.dumps(targets, sort_keys=True).encode()).hexdigest()[:16]}"


def compile_once(cache: Path, sm: int, sms: int, family: dict) -> Optional[str]:
    """The model's kernels for this GPU compiled into the run's cache before the first step, by one process: FA4
    compiles what it lacks in every rank at once (280 s a step on 8 B300s: Dao-AILab/flash-attention#2635). The
    first rank here to lock the cache compiles (build.py, without launching anything on the GPU); the others wait,
    then find its mark and load. None when this rank compiled nothing (the mark was there)."""
    targets = run_targets(sm, sms, family)
    mark = compiled_mark(cache, targets)
    with open(cache / ".vlmgrpo-compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, however this process ends
        if mark.exists():
            return None
        with tempfile.NamedTemporaryFile("w", suffix=".json", dir=cache, delete=False) as stream:
            json.dump(targets, stream)
        started = time.monotonic()
        try:
            done = subprocess.run([sys.executable, build.__file__, "build", "--out", str(cache), "--targets",
                                   stream.name, "--jobs", "1"], capture_output=True, text=True)
        finally:
            os.unlink(stream.name)
            shutil.rmtree(cache / ".cutlass", ignore_errors=True)  # the DSL's own scratch
        if done.returncode != 0:  # the first step compiles instead, as without this
            log.warning("flash-attention 4 kernels: compiling them before the first step failed; each rank compiles "
                        "what it lacks at its first step: %s", (done.stderr or done.stdout).strip()[-500:])
            return None
        mark.touch()
        keys = json.loads((cache / "manifest.json").read_text())["gpus"]["this GPU"]["keys"]
        return f"{keys} kernels in {time.monotonic() - started:.0f} s"


def prepare(output_dir: str, model: Optional[dict] = None, environ=os.environ) -> str:
    """Set FA4's cache up for this process before it is imported, seeded from the image, and the model's kernels the
    image lacks compiled once for all ranks (model: its family, model_family); the one line that says where this
    GPU's kernels come from (logged by the caller's rank 0 only)."""
    import torch

    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    shipped = manifest(environ)
    changed = changed_sources(shipped) if shipped else []
    cache, source, line = plan(output_dir, major * 10 + minor, sms, shipped, changed, environ)
    cache.mkdir(parents=True, exist_ok=True)
    if source is not None:
        seed(source, cache)
    if model is not None and missing_cases(model, shipped, source is not None):
        compiled = compile_once(cache, major * 10 + minor, sms, model)
        if compiled:
            line += f"; this model's that the image lacks were compiled here once, before the first step ({compiled})"
    environ[CACHE_ENABLED] = "1"
    environ[CACHE_DIR] = str(cache)
    return line
