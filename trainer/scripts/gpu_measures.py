"""What verify_gpu.py measures: GRPO steps through vlmgrpo's own trainer (with and without colocated vLLM), and
Qwen-VL's Conv3d patch embedding with cuDNN on and off.

Only torch, transformers, accelerate, peft, TRL (and vlmgrpo from this checkout) are imported: the GPU machines this
runs on carry nothing else, and no network. Every figure is measured here; nothing is estimated."""

from __future__ import annotations

import gc
import importlib.util
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

TRAINER_SRC = Path(__file__).resolve().parents[1] / "src"
CONTRACT_SRC = Path(__file__).resolve().parents[2] / "contract" / "src"  # the contract vlmgrpo requires


def import_trainer() -> None:
    """vlmgrpo and the contract it requires from this checkout when they are not installed (a lent GPU machine has the
    repository, not the wheels)."""
    for package, source in (("vlmgrpo", TRAINER_SRC), ("imagegen_contract", CONTRACT_SRC)):
        if importlib.util.find_spec(package) is None:
            sys.path.insert(0, str(source))


@dataclass
class RunSettings:
    device: str  # "cuda" or "cpu"
    steps: int
    num_generations: int
    batch_size: int
    completion_length: int
    vllm_memory: float = 0.3
    attention: str = "auto"  # the trainer's attn_implementation: auto chooses as `vlmgrpo train` does


def vllm_status() -> tuple[bool, str]:
    """Whether vLLM imports here, and why not: a run with it is measured only where it does."""
    try:
        import vllm
    except Exception as error:  # absent, or built against another torch (an undefined symbol)
        if isinstance(error, ModuleNotFoundError):
            return False, "vLLM not installed"
        return False, f"vLLM does not import ({type(error).__name__}: {(str(error).splitlines() or [''])[0]})"
    return True, f"vllm {getattr(vllm, '__version__', '?')}"


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def step_timer(device: str):
    """A callback recording each optimizer step's wall time, the GPU's queued work included."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []
            self._started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            self._started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            self.seconds.append(time.perf_counter() - self._started)

    return StepTimer()


def timed_trainer_class(device: str):
    """vlmgrpo's GRPO trainer with its rollouts timed: each _generate call's seconds and completion tokens."""
    from vlmgrpo.commands.grpo import trainer_class

    class TimedRollouts(trainer_class()):
        rollouts: list[tuple[float, int]]

        def _generate(self, prompts):
            synchronize(device)
            started = time.perf_counter()
            result = super()._generate(prompts)
            synchronize(device)
            completion_ids = result[1]  # TRL: prompt_ids, completion_ids, ...
            self.rollouts.append((time.perf_counter() - started, sum(len(ids) for ids in completion_ids)))
            return result

    return TimedRollouts


def grpo_config(settings: RunSettings, output: Path, use_vllm: bool):
    """VLM-R1's recipe (vlmgrpo's defaults), cut to a few short steps with no checkpoints or reports."""
    from vlmgrpo.config.trl_configs import VLMR1GRPOConfig

    # Its "auto" defaults (bf16, report_to) are given here.
    kwargs = dict(output_dir=str(output), max_steps=settings.steps, per_device_train_batch_size=settings.batch_size,
                  gradient_accumulation_steps=1, num_generations=settings.num_generations,
                  max_completion_length=settings.completion_length, save_strategy="no", report_to="none",
                  disable_tqdm=True, bf16=settings.device == "cuda", use_cpu=settings.device == "cpu")
    if use_vllm:
        kwargs.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=settings.vllm_memory)
    return VLMR1GRPOConfig(**kwargs)


def build_trainer(tiny: dict, settings: RunSettings, output: Path, use_vllm: bool):
    """The trainer as `vlmgrpo train` builds it: its model and processor loading (attention and dtype chosen for the
    hardware), its data checks, rewards and trainer class."""
    from vlmgrpo.data.datasets import load_data
    from vlmgrpo.models.attention import choose_attention
    from vlmgrpo.models.loading import answer_box_space, load_model, load_processor, resize_function
    from vlmgrpo.data.rec import to_hf_dataset, validate_row
    from vlmgrpo.rewards import build_rewards
    from vlmgrpo.config.model_config import ModelConfig
    from vlmgrpo.config.template import REC_QUESTION_TEMPLATE

    model_config = ModelConfig(model_name_or_path=tiny["model"], attn_implementation=settings.attention)
    args = grpo_config(settings, output, use_vllm)  # finished first, as training/started.py does: TRL sets the device
    processor = load_processor(model_config)
    attention = choose_attention(model_config.attn_implementation)
    # as training/started.py does, where an image cache is named
    kernels = image_kernels(attention, tiny["model"], output)
    model = load_model(model_config, vision=True, attention=attention)
    space = answer_box_space("auto", model.config.model_type)
    data = load_data([tiny["data"]], tiny["image_root"], validate=validate_row)
    timer = step_timer(settings.device)
    trainer = timed_trainer_class(settings.device)(
        model=model, processing_class=processor, args=args,
        reward_funcs=build_rewards(["iou", "format"], space, resize_function(processor), None),
        train_dataset=to_hf_dataset(data.samples, REC_QUESTION_TEMPLATE), callbacks=[timer])
    trainer.rollouts = []
    trainer.kernels = kernels
    return trainer, timer


def image_kernels(attention: str, model: str, output: Path) -> Optional[str]:
    """With flash-attention 4 and VLMGRPO_FA4_KERNELS naming a cache (what an image holds): the run's cache seeded
    from it, as a run's start does (vlmgrpo.fa4kernels.runtime.prepare), and its line; None otherwise: FA4 then
    compiles at the first call, its cache off."""
    from vlmgrpo.fa4kernels.runtime import KERNELS_VARIABLE, model_family, prepare
    from vlmgrpo.models.attention import FA4
    from vlmgrpo.models.loading import load_model_config

    if attention != FA4 or not os.environ.get(KERNELS_VARIABLE):
        return None
    return prepare(str(output), model_family(load_model_config(model)))


def grpo_run(tiny: dict, settings: RunSettings, output: Path, use_vllm: bool) -> dict:
    """settings.steps GRPO steps; step time and rollout tokens/s after the first step (its compilation, cuDNN
    autotuning and vLLM's graph capture are warm-up), and the run's peak GPU memory."""
    import torch

    if settings.device == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    trainer, timer = build_trainer(tiny, settings, output, use_vllm)
    setup = time.perf_counter() - started
    trainer.train()
    result = {"status": "measured", "attention": trainer.model.config._attn_implementation,
              **({"fa4_kernels": trainer.kernels} if trainer.kernels else {}),
              "steps": len(timer.seconds), "setup_seconds": round(setup, 2),
              "step_seconds_first": round(timer.seconds[0], 4) if timer.seconds else None,
              **step_figures(timer.seconds), **rollout_figures(trainer.rollouts), **memory_figures(settings.device)}
    del trainer
    gc.collect()
    return result


def step_figures(seconds: list[float]) -> dict:
    later = seconds[1:] or seconds
    if not later:
        return {"step_seconds_mean": None, "step_seconds_median": None}
    return {"step_seconds_mean": round(statistics.mean(later), 4),
            "step_seconds_median": round(statistics.median(later), 4)}


def rollout_figures(rollouts: list[tuple[float, int]]) -> dict:
    later = rollouts[1:] or rollouts
    seconds, tokens = sum(s for s, _ in later), sum(t for _, t in later)
    return {"rollouts": len(rollouts), "rollout_tokens": tokens, "rollout_seconds": round(seconds, 4),
            "rollout_tokens_per_second": round(tokens / seconds, 1) if seconds else None}


def memory_figures(device: str) -> dict:
    """torch's own peak (what the allocator handed out) and the device's use at the end (vLLM's pool included)."""
    if device != "cuda":
        return {"peak_memory_allocated_gib": None, "device_memory_used_gib": None}
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"peak_memory_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3),
            "device_memory_used_gib": round((total - free) / 2**30, 3)}


def patch_embed(embed_dim: int):
    """Qwen2.5-VL's vision patch embedding from transformers (a bias-free Conv3d, kernel = stride = 2x14x14 over 3
    channels); a plain Conv3d of that shape where this transformers has none."""
    import torch

    try:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed
    except ImportError:
        return torch.nn.Conv3d(3, embed_dim, kernel_size=(2, 14, 14), stride=(2, 14, 14), bias=False), "nn.Conv3d"
    module = Qwen2_5_VisionPatchEmbed(patch_size=14, temporal_patch_size=2, in_channels=3, embed_dim=embed_dim)
    return module, f"transformers Qwen2_5_VisionPatchEmbed ({type(module.proj).__name__})"


def median_seconds(work: Callable[[], object], device: str, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):  # cuDNN picks its algorithm on the first calls
        work()
    synchronize(device)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def conv3d_timing(device: str, patches: int, embed_dim: int, repeats: int) -> dict:
    """Forward, and forward plus backward (the vision tower trains unless frozen), of the patch embedding over
    `patches` patches in bf16 on the GPU (float32 on the CPU), with torch.backends.cudnn.enabled True, then False."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    module, name = patch_embed(embed_dim)
    module = module.to(device=device, dtype=dtype)
    pixels = torch.randn(patches, 3 * 2 * 14 * 14, device=device, dtype=dtype)

    def forward():
        with torch.no_grad():
            return module(pixels.view(-1, 3, 2, 14, 14)).view(-1, embed_dim)

    def forward_backward():
        module.zero_grad(set_to_none=True)
        module(pixels.view(-1, 3, 2, 14, 14)).float().square().mean().backward()

    result = {"status": "measured", "module": name, "patches": patches, "embed_dim": embed_dim,
              "dtype": str(dtype).replace("torch.", ""), "repeats": repeats}
    outputs = {}
    for enabled in (True, False):
        key = "cudnn_on" if enabled else "cudnn_off"
        with torch.backends.cudnn.flags(enabled=enabled):
            outputs[key] = forward().float()
            result[f"{key}_forward_ms"] = round(median_seconds(forward, device, repeats) * 1000, 3)
            result[f"{key}_forward_backward_ms"] = round(median_seconds(forward_backward, device, repeats) * 1000, 3)
    result["max_abs_difference"] = float((outputs["cudnn_on"] - outputs["cudnn_off"]).abs().max())
    on, off = result["cudnn_on_forward_ms"], result["cudnn_off_forward_ms"]
    result["forward_speedup_cudnn"] = round(off / on, 2) if on else None
    return result


def measure_part(work: Callable[[], dict]) -> dict:
    """One part's figures, or its failure as one line: the other parts still run and are reported."""
    try:
        return work()
    except Exception as error:  # a failed part is a result to report, not a crash
        first = (str(error).splitlines() or [""])[0]
        return {"status": "failed", "error": f"{type(error).__name__}: {first}"[:500]}


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def vllm_part(tiny: dict, settings: RunSettings, output: Path) -> dict:
    if settings.device != "cuda":
        return skipped("colocated vLLM needs a CUDA GPU")
    available, why = vllm_status()
    if not available:
        return skipped(why)
    return measure_part(lambda: {**grpo_run(tiny, settings, output, use_vllm=True), "vllm": why})


def cudnn_version() -> Optional[int]:
    import torch

    return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None


def attention_choice() -> dict:
    """What `vlmgrpo train`'s attn_implementation auto picks on this machine, and why (models/attention.py)."""
    from vlmgrpo.models.attention import choose_attention, fa2_status, fa4_status, fa4_majors, gpu_capabilities

    gpus = gpu_capabilities()
    return {"status": "measured", "auto": choose_attention("auto"),
            "gpus": [f"sm{major}{minor}" for major, minor in gpus], "fa4_majors": list(fa4_majors()),
            "flash_attn_4": fa4_status(gpus)[1], "flash_attn_2": fa2_status(gpus)[1]}


def gpu_checks() -> dict:
    """`vlmgrpo selftest --require-gpu`'s GPU checks (gpu.*) and flash-attention 4's in-image checks, as an image runs
    them (vlmgrpo/image/checks: their needs decide, a check whose component is absent is skipped with its reason)."""
    from vlmgrpo.image.checks import FAIL, Context, discover, run_checks

    modules = [module for module in discover()
               if any(name.startswith(("gpu.", "flash_attn_4.")) for name in module.NAMES)]
    rows = run_checks(Context(expected=None, require_gpu=True, skip_train=True), modules)
    reported = {row["name"]: f"{row['status']}: {row['detail']}" for row in rows}
    failed = sorted(name for name, line in reported.items() if line.startswith(FAIL))
    return {"status": "failed" if failed else "measured", "checks": reported,
            **({"error": f"checks failed: {', '.join(failed)}"} if failed else {})}


def flash_attn_4_part(tiny: dict, settings: RunSettings, output: Path) -> dict:
    """GRPO steps with flash-attention 4 (the model's attention and its vision tower's), where flash-attn-4 is
    installed; the same run with settings.attention sdpa is its reference."""
    from vlmgrpo.models.attention import installed

    if settings.device != "cuda":
        return skipped("flash-attention 4 needs a CUDA GPU")
    if installed("flash-attn-4") is None:
        return skipped("flash-attn-4 is not installed")
    return measure_part(lambda: grpo_run(tiny, settings, output, use_vllm=False))


def fa4_cached_part(tiny: dict, settings: RunSettings, args_line: list[str], output: Path) -> dict:
    """The grpo_fa4_hd128 part with the kernels built beforehand (fa4_cached_run), where it can run."""
    from vlmgrpo.models.attention import installed

    if settings.device != "cuda":
        return skipped("flash-attention 4 needs a CUDA GPU")
    if installed("flash-attn-4") is None:
        return skipped("flash-attn-4 is not installed")
    return measure_part(lambda: fa4_cached_run(tiny, args_line, output))


def fa4_cached_run(tiny: dict, args_line: list[str], output: Path) -> dict:
    """flash-attention 4 with its kernels compiled beforehand, as an image ships them: build.py compiles, without
    launching anything, the model's attention for this GPU (its architecture and SM count) into a cache (timed: what
    the image's build spends), then the grpo_fa4_hd128 part runs in a fresh process (FA4 reads its cache's place at
    import) with VLMGRPO_FA4_KERNELS naming it: its first step is the one to compare with SDPA's."""
    import json
    import subprocess

    import torch

    from vlmgrpo.fa4kernels import build
    from vlmgrpo.fa4kernels.runtime import KERNELS_VARIABLE, model_family, run_targets
    from vlmgrpo.models.loading import load_model_config

    major, minor = torch.cuda.get_device_capability()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    targets = run_targets(major * 10 + minor, sms, model_family(load_model_config(tiny["model"])))
    cache = output / "image-kernels"
    cache.mkdir(parents=True, exist_ok=True)
    (output / "targets.json").write_text(json.dumps(targets))
    started = time.perf_counter()
    subprocess.run([sys.executable, build.__file__, "build", "--out", str(cache), "--targets",
                    str(output / "targets.json")], check=True, capture_output=True, text=True)
    built = json.loads((cache / "manifest.json").read_text())["gpus"]["this GPU"]
    run = subprocess.run([sys.executable, *args_line, "--parts", "grpo_fa4_hd128", "--out", str(output / "run.json")],
                         env={**os.environ, KERNELS_VARIABLE: str(cache)}, capture_output=True, text=True)
    if run.returncode != 0 and not (output / "run.json").exists():
        raise RuntimeError(f"the cached run failed: {run.stderr.strip()[-300:]}")
    part = json.loads((output / "run.json").read_text())["parts"]["grpo_fa4_hd128"]
    return {**part, "kernels_built": built["keys"], "build_seconds": round(time.perf_counter() - started, 1),
            "build_compiles": built["compiles"]}
