#!/usr/bin/env bash
# GRPO on one host with 8 GPUs: GPU 0 generates the completions (TRL's vLLM server, `vllm-serve`), GPUs 1-7
# do the training (VLM-R1's REC recipe, Qwen2.5-VL-3B, DeepSpeed ZeRO-3, vllm_mode: server).
#
#   IMAGE=ghcr.io/imagegen/vlm-grpo:cu130-torch2.13-vllm0.31 DATA=/srv/rec OUT=/srv/runs \
#       examples/launch/vllm-server.sh [more trainer flags, e.g. --dry-run or --resume auto]
#
# DATA holds grpo_vllm.yaml (examples/qwen2_5_vl_3b_rec_zero3.yaml with examples/launch/vllm-server.yaml appended),
# models/Qwen2.5-VL-3B-Instruct, rec_jsons_processed/ and coco/. The image must have vLLM: its name ends -vllm<X.Y>
# (`imagegen matrix --with vllm`); another one stops at once with one line saying so.
set -euo pipefail

IMAGE=${IMAGE:?set IMAGE to an image with vLLM, e.g. ghcr.io/imagegen/vlm-grpo:cu130-torch2.13-vllm0.31}
DATA=${DATA:?set DATA to the directory with the config, the model and the data set}
OUT=${OUT:?set OUT to a directory for checkpoints and the final model}
MODEL=${MODEL:-/data/models/Qwen2.5-VL-3B-Instruct}
PORT=${PORT:-8000}               # vllm_server_port in the config
SERVER=${SERVER:-vlmgrpo-vllm}   # the server container's name
mkdir -p "$OUT"

run_training() {
    docker run --rm --gpus all --ipc=host --network host --shm-size=16g --ulimit memlock=-1 \
        --user "$(id -u):$(id -g)" -e CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7 \
        -v "$DATA:/data:ro" -v "$OUT:/out" \
        "$IMAGE" train --config /data/grpo_vllm.yaml --nproc-per-node 7 --deepspeed zero3 "$@"
}

# --dry-run and --print-config load no weights and generate nothing: no server for them (vLLM missing from the
# image, or no GPU, is still one line from the trainer).
case " $* " in
    *" --dry-run "* | *" --print-config "*) run_training "$@"; exit ;;
esac

# Both containers see every GPU and split them with CUDA_VISIBLE_DEVICES, as TRL's own server-mode example does:
# after each step the trainer sends its weights to the server over NCCL (vllm_group_port, 51216), which needs the
# host's network and IPC. The server stops when this script ends, however it ends.
docker run -d --rm --name "$SERVER" --gpus all --ipc=host --network host --shm-size=16g \
    --user "$(id -u):$(id -g)" -e CUDA_VISIBLE_DEVICES=0 -v "$DATA:/data:ro" \
    "$IMAGE" vllm-serve --model "$MODEL" --tensor-parallel-size 1 --port "$PORT"
trap 'docker stop "$SERVER" >/dev/null 2>&1 || true' EXIT

# The trainer waits for the server (vllm_server_timeout) before its first step.
run_training "$@"
