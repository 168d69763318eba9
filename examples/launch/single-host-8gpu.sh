#!/usr/bin/env bash
# VLM-R1's REC recipe (Qwen2.5-VL-3B, DeepSpeed ZeRO-3) on one host with 8 GPUs.
#
#   IMAGE=ghcr.io/imagegen/vlm-grpo:cu128-torch2.8 DATA=/srv/rec OUT=/srv/runs \
#       examples/launch/single-host-8gpu.sh [more train flags, e.g. --dry-run or --resume auto]
#
# DATA holds qwen2_5_vl_3b_rec_zero3.yaml (copied from examples/), models/Qwen2.5-VL-3B-Instruct,
# rec_jsons_processed/ and coco/; it is mounted read-only at /data. OUT receives the checkpoints,
# metrics.jsonl and the final model under /out.
set -euo pipefail

IMAGE=${IMAGE:-ghcr.io/imagegen/vlm-grpo:latest}
DATA=${DATA:?set DATA to the directory with the config, the model and the data set}
OUT=${OUT:?set OUT to a directory for checkpoints and the final model}
mkdir -p "$OUT"

# --ipc=host: NCCL and the data loader workers talk through /dev/shm, and Docker's 64 MB one
# is far too small. Where host IPC is not allowed, drop it and --shm-size=16g takes effect.
# --user: files under OUT belong to whoever ran this script, not to the image's uid 1000.
exec docker run --rm --gpus all --ipc=host --shm-size=16g --ulimit memlock=-1 \
    --user "$(id -u):$(id -g)" \
    -v "$DATA:/data:ro" -v "$OUT:/out" \
    "$IMAGE" train --config /data/qwen2_5_vl_3b_rec_zero3.yaml --nproc-per-node 8 --deepspeed zero3 "$@"
