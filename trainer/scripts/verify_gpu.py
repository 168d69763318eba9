#!/usr/bin/env python3
"""Measure vlmgrpo on one GPU, in under 10 minutes: GRPO steps with and without colocated vLLM, Qwen-VL's Conv3d.

    python trainer/scripts/verify_gpu.py --out result.json            # on a lent GPU
    python trainer/scripts/verify_gpu.py --cpu-smoke --out smoke.json # the same code paths, tiny, on the CPU

Parts (each measured, skipped with its reason, or failed with its error; one failing does not stop the others):
- conv3d: Qwen2.5-VL's vision patch embedding (3 channels, temporal patch 2, patch 14, --conv-embed-dim) over
  --conv-patches patches in bf16, forward and forward+backward, with torch.backends.cudnn.enabled True and False
  (torch 2.9 with cuDNN < 9.15 ran it very slowly: pytorch/pytorch#166122);
- grpo: --steps GRPO steps through vlmgrpo's own trainer (its model loading, attention choice, data checks,
  rewards, trainer class) on a tiny random Qwen2.5-VL made here (or --model PATH) and a generated grounding set:
  seconds per step, rollout tokens/s and torch.cuda.max_memory_allocated;
- attention: what the trainer's attn_implementation auto picks here, and why (flash-attention 4, 2 or SDPA);
- gpu_checks: `vlmgrpo selftest`'s GPU checks (gpu.*: CUDA, nvidia-smi, bf16 matmul, NCCL all-reduce, DeepSpeed ops,
  flash-attention 2 and 4 against SDPA) and flash-attention 4's own checks, each passed, failed or skipped by its need;
- grpo_sdpa_hd128, grpo_fa4_hd128: the grpo part on the tiny model with heads of 128 (flash-attention 4's kernels
  take 64 to 256; the tiny model's are 16), with SDPA and with flash-attention 4 (skipped where flash-attn-4 is not
  installed), text model and vision tower alike;
- grpo_fa4_cached_hd128: grpo_fa4_hd128 with FA4's kernels compiled beforehand for this GPU and the model, as an image
  ships them (vlmgrpo/fa4kernels: the build's seconds and kernels, then the run in a fresh process, its first step);
- grpo_vllm: the same with TRL's colocated vLLM, only where vLLM imports (else "skipped: vLLM not installed").
--parts picks some of them (a lent GPU machine with only minutes can run them in two calls).

Prints a short table on stderr and the JSON result on stdout (and to --out). Exit 0 when nothing failed, including
on a machine without a CUDA GPU ("no CUDA GPU: nothing measured", with the reason); 1 when a part failed; 2 on bad
arguments. Imports only torch, transformers, accelerate, peft, TRL (with datasets), pydantic and vlmgrpo from this
checkout, and flash-attn-4 where installed; no network.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_measures as measures  # noqa: E402  (beside this script, which is run as a file, not a package)

# Sizes of a GPU run and of --cpu-smoke: the smoke run takes the same code paths with tiny sizes.
GPU_SIZES = {"steps": 10, "num_generations": 4, "batch_size": 8, "completion_length": 128,
             "conv_patches": 8 * 2304, "conv_embed_dim": 1280, "conv_repeats": 20}  # 8 images of 672x672 pixels
SMOKE_SIZES = {"steps": 2, "num_generations": 2, "batch_size": 2, "completion_length": 8,
               "conv_patches": 64, "conv_embed_dim": 32, "conv_repeats": 2}


# Every part, in the order they run; --parts picks some.
PARTS = ("conv3d", "attention", "gpu_checks", "grpo", "grpo_sdpa_hd128", "grpo_fa4_hd128", "grpo_fa4_cached_hd128",
         "grpo_vllm")
WIDE_HEAD_DIM = 128  # the hd128 parts' tiny model: heads flash-attention 4 runs (it takes 64 to 256)
# --hd128-shape 3b: the hd128 parts' model with Qwen2.5-VL-3B-Instruct's layer sizes (its config.json), random bf16
# weights and the tiny vocabulary: step time and memory of a real size where no weights can be downloaded. Its vision
# tower has heads of 80, as the real one.
QWEN2_5_VL_3B = {
    "text": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                 num_key_value_heads=2),
    "vision": dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                   fullatt_block_indexes=[7, 15, 23, 31]),
}


class BadArguments(Exception):
    """An option out of range: exit 2 with this one line."""


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    parser.add_argument("--model", help="a Qwen2-VL / Qwen2.5-VL directory to train instead of a tiny random one")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU: tests the script, measures "
                        "nothing worth recording")
    parser.add_argument("--work-dir", type=Path, help="where the tiny model, data and runs go (default: temporary)")
    for name, value in GPU_SIZES.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                            help=f"default {value} on a GPU, {SMOKE_SIZES[name]} with --cpu-smoke")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"the parts to run, comma-separated (default all: {','.join(PARTS)})")
    parser.add_argument("--hd128-shape", choices=("tiny", "3b"), default="tiny",
                        help="the hd128 parts' model: the tiny one with heads of 128, or Qwen2.5-VL-3B's layer sizes "
                        "with random weights (a real size's step time and memory; its vision heads are 80)")
    args = parser.parse_args(argv)
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = [part for part in args.parts if part not in PARTS]
    if unknown or not args.parts:
        raise BadArguments(f"--parts {','.join(unknown) or '(none)'}: choose from {','.join(PARTS)}")
    sizes = SMOKE_SIZES if args.cpu_smoke else GPU_SIZES
    for name, value in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
        elif getattr(args, name) < 1:
            raise BadArguments(f"--{name.replace('_', '-')} {getattr(args, name)}: at least 1")
    if args.batch_size % args.num_generations:
        raise BadArguments(f"--batch-size {args.batch_size}: a multiple of --num-generations {args.num_generations} "
                           "(TRL samples whole groups)")
    if args.out and not args.out.parent.is_dir():
        raise BadArguments(f"--out {args.out}: the directory {args.out.parent} does not exist")
    if args.model and not (Path(args.model) / "config.json").is_file():
        raise BadArguments(f"--model {args.model}: no config.json there (a local model directory; nothing is "
                           "downloaded)")
    return args


def no_gpu_reason() -> Optional[str]:
    """Why no CUDA GPU can be measured here, or None when one can."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a build without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return None


def machine() -> dict:
    import torch
    import transformers
    import trl

    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
               "capability": f"{props.major}.{props.minor}", "count": torch.cuda.device_count()}
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": measures.cudnn_version(),
            "transformers": transformers.__version__, "trl": trl.__version__, "vllm": measures.vllm_status()[1],
            "gpu": gpu}


def make_model(out_dir: Path, head_dim: int, family: str, shape: str = "tiny", device: str = "cpu") -> Path:
    from vlmgrpo.models.tiny import make_model as make

    if shape == "tiny":
        return make(out_dir, head_dim=head_dim, family=family)
    return make_3b_shaped(out_dir, device)


def make_3b_shaped(out_dir: Path, device: str) -> Path:
    """The tiny model's tokenizer and processor with Qwen2.5-VL-3B's layer sizes, random bf16 weights made on the
    device (a float32 model of that size made on the CPU takes minutes)."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from vlmgrpo.models.tiny import chat_template, make_model_config, make_processor, make_tokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(out_dir)
    tokenizer.chat_template = chat_template("qwen2_5_vl")
    config = make_model_config(tokenizer, "qwen2_5_vl", head_dim=WIDE_HEAD_DIM)
    for part, sizes in (("text_config", QWEN2_5_VL_3B["text"]), ("vision_config", QWEN2_5_VL_3B["vision"])):
        made = getattr(config, part)  # made anew: a config derives per-layer lists (layer_types) from its sizes
        kept = {key: value for key, value in made.to_dict().items() if key not in ("layer_types", "model_type")}
        setattr(config, part, type(made)(**{**kept, **sizes}))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, torch_dtype=torch.bfloat16)
    text = config.get_text_config()
    model.generation_config = GenerationConfig(eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id,
                                               do_sample=True)
    model.save_pretrained(out_dir)
    make_processor(tokenizer, "qwen2_5_vl").save_pretrained(out_dir)
    del model
    return out_dir


def make_data(args: argparse.Namespace, work: Path) -> dict:
    """A tiny random Qwen2.5-VL and a generated grounding set (vlmgrpo's own maker); --model replaces the model."""
    from vlmgrpo.models.tiny import make_images_and_rows, make_tiny

    if args.model:
        data_file = make_images_and_rows(work / "data", rows=4 * args.batch_size)
        return {"model": args.model, "data": str(data_file), "image_root": str(data_file.parent / "images")}
    return make_tiny(work / "tiny", rows=4 * args.batch_size)


def measure_all(args: argparse.Namespace, device: str, work: Path) -> dict:
    settings = measures.RunSettings(device=device, steps=args.steps, num_generations=args.num_generations,
                                    batch_size=args.batch_size, completion_length=args.completion_length)
    wanted = args.parts
    parts = {}
    if "conv3d" in wanted:
        parts["conv3d"] = measures.measure_part(lambda: measures.conv3d_timing(
            device, args.conv_patches, args.conv_embed_dim, args.conv_repeats))
    if "attention" in wanted:
        parts["attention"] = measures.measure_part(measures.attention_choice)
    if "gpu_checks" in wanted:
        parts["gpu_checks"] = (measures.measure_part(measures.gpu_checks) if device == "cuda"
                               else measures.skipped("the GPU checks need a CUDA GPU"))
    grpo_parts = [name for name in PARTS if name.startswith("grpo") and name in wanted]
    if not grpo_parts:
        return parts
    made = measures.measure_part(lambda: {"status": "measured", **make_data(args, work)})
    if made["status"] == "measured" and any(part.endswith("hd128") for part in grpo_parts):
        # flash-attention 4's kernels take heads of 64 to 256: the tiny model with 128, its data unchanged
        made_wide = measures.measure_part(lambda: {**made, "model": str(make_model(
            work / f"{args.hd128_shape}_hd128", head_dim=WIDE_HEAD_DIM, family="qwen2_5_vl", shape=args.hd128_shape,
            device=device))})
    else:
        made_wide = made
    for name in grpo_parts:
        tiny = made_wide if name.endswith("hd128") else made
        if tiny["status"] != "measured":
            parts[name] = {**tiny, "error": f"making the model and data: {tiny['error']}"}
        elif name == "grpo":
            parts[name] = measures.measure_part(lambda: measures.grpo_run(tiny, settings, work / name, use_vllm=False))
        elif name == "grpo_sdpa_hd128":
            parts[name] = measures.measure_part(lambda: measures.grpo_run(
                tiny, dataclasses.replace(settings, attention="sdpa"), work / name, use_vllm=False))
        elif name == "grpo_fa4_hd128":
            parts[name] = measures.flash_attn_4_part(
                tiny, dataclasses.replace(settings, attention="flash_attention_4"), work / name)
        elif name == "grpo_fa4_cached_hd128":
            again = [__file__, "--hd128-shape", args.hd128_shape, "--work-dir", str(work / name / "run"),
                     *(f"--{key.replace('_', '-')}={getattr(args, key)}" for key in GPU_SIZES)]
            parts[name] = measures.fa4_cached_part(tiny, settings, again, work / name)
        else:  # grpo_vllm, last: colocated vLLM keeps part of the GPU's memory for the rest of the process
            parts[name] = measures.vllm_part(tiny, settings, work / name)
    return parts


def verify(args: argparse.Namespace) -> dict:
    result = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "mode": "cpu-smoke" if args.cpu_smoke else "gpu"}
    reason = None if args.cpu_smoke else no_gpu_reason()
    if reason:
        return {**result, "status": "nothing measured", "reason": reason, "parts": {}}
    measures.import_trainer()
    result["machine"] = machine()
    result["sizes"] = {**{name: getattr(args, name) for name in GPU_SIZES}, "hd128_shape": args.hd128_shape}
    with tempfile.TemporaryDirectory(prefix="verify-gpu-") as scratch:
        work = args.work_dir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        result["parts"] = measure_all(args, "cpu" if args.cpu_smoke else "cuda", work)
    failed = [name for name, part in result["parts"].items() if part["status"] == "failed"]
    result["status"] = f"failed: {', '.join(failed)}" if failed else "measured"
    return result


def table(result: dict) -> str:
    """The figures worth a glance, one line per part."""
    if not result["parts"]:
        return f"no CUDA GPU: nothing measured ({result['reason']})"
    lines = [f"{'part':<16} {'status':<9} figures"]
    for name, part in result["parts"].items():
        if part["status"] == "skipped":
            figures = f"skipped: {part['reason']}"
        elif part["status"] == "failed":
            figures = part["error"]
        elif name == "attention":
            figures = f"auto picks {part['auto']} on {', '.join(part['gpus']) or 'no GPU'} ({part['flash_attn_4']})"
        elif name == "gpu_checks":
            statuses = [line.split(":")[0] for line in part["checks"].values()]
            figures = ", ".join(f"{statuses.count(s)} {s}" for s in ("pass", "fail", "skip") if s in statuses)
        elif name == "conv3d":
            figures = (f"forward {part['cudnn_on_forward_ms']} ms cuDNN on / {part['cudnn_off_forward_ms']} ms off; "
                       f"fwd+bwd {part['cudnn_on_forward_backward_ms']} / {part['cudnn_off_forward_backward_ms']} ms")
        else:  # the first step apart: with FA4 it holds the kernels' compiling, or their loading from a cache
            figures = (f"{part['attention']}: first step {part['step_seconds_first']} s, {part['step_seconds_mean']} "
                       "s/step after, "
                       f"{part['rollout_tokens_per_second']} rollout tokens/s, "
                       f"peak {part['peak_memory_allocated_gib']} GiB allocated")
        lines.append(f"{name:<16} {part['status']:<9} {figures}")
    return "\n".join(lines)


def write_json(path: Path, result: dict) -> None:
    """Whole or not at all: a temporary file beside it, then renamed."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as stream:
        json.dump(result, stream, indent=2)
        stream.write("\n")
    os.replace(stream.name, path)


def main(argv: Optional[list[str]] = None) -> int:
    try:
        args = parse_args(argv)
    except BadArguments as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its logs: stdout carries the JSON alone
        result = verify(args)
    print(table(result), file=sys.stderr)
    print(json.dumps(result))
    if args.out:
        write_json(args.out, result)
    return 1 if result["status"].startswith("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
