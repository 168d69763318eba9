"""GRPO's rollouts on vLLM: TRL's own keys (use_vllm, vllm_mode, vllm_gpu_memory_utilization,
vllm_tensor_parallel_size, vllm_enable_sleep_mode, vllm_server_host/port/base_url, ...) reach GRPOConfig unchanged;
this module checks, before any weights load (and under --dry-run), that vLLM can run here at all, and starts TRL's
server for `vllm_mode: server` (`vlmgrpo vllm-serve`).

Only some images carry vLLM (vLLM pins its own torch and transformers, so its image is a line of its own in the
matrix); the message for the others says how to find those.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from vlmgrpo.errors import ConfigError

# How to find an image with vLLM: imagegen names each such image -vllm<major.minor> (a tag too), and lists them.
VLLM_IMAGES = ("use an image with vLLM: its name, a tag too, ends -vllm<X.Y> (e.g. vlm-grpo:cu130-torch2.13-vllm0.31); "
               "`imagegen matrix --with vllm` lists them")
MODES = ("colocate", "server")


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def not_installed(what: str) -> ConfigError:
    return ConfigError(f"{what}: vLLM is not installed in this image; {VLLM_IMAGES}")


def check_vllm(config, gpu_available) -> None:
    """use_vllm: a mode TRL knows, vLLM importable, a CUDA GPU visible; one line each. gpu_available() is asked only
    when vLLM is installed (it imports torch)."""
    trl = config.trl
    if not trl.use_vllm:
        return
    mode = trl.vllm_mode
    if mode not in MODES:
        raise ConfigError(f"{config.where('vllm_mode')}: key 'vllm_mode': {mode!r} is not one of: {', '.join(MODES)}")
    where = f"{config.where('use_vllm')}: key 'use_vllm'"
    if not vllm_installed():
        raise not_installed(where) from None
    if not gpu_available():
        raise ConfigError(f"{where}: vLLM generates on CUDA GPUs and none is visible here; run on a GPU host "
                          "(docker run --gpus all), or set use_vllm: false")


def trl_script() -> str:
    """TRL's console script beside this interpreter (the image's venv), else the one on PATH."""
    sibling = Path(sys.executable).with_name("trl")
    return str(sibling) if sibling.exists() else "trl"


def vllm_serve_command(args: list[str]) -> list[str]:
    """`vlmgrpo vllm-serve ARGS` is TRL's `trl vllm-serve ARGS`: the server `vllm_mode: server` trains against."""
    return [trl_script(), "vllm-serve", *args]


def exec_vllm_serve(args: list[str]) -> None:
    """Replace this process with TRL's server (signals reach it directly); ConfigError where vLLM is not installed."""
    if not vllm_installed():
        raise not_installed("vllm-serve")
    command = vllm_serve_command(args)
    try:
        os.execv(command[0], command) if os.path.isabs(command[0]) else os.execvp(command[0], command)
    except OSError as exc:
        raise ConfigError(f"vllm-serve: cannot run {command[0]}: {exc.strerror}") from None
