#!/usr/bin/env bash
# The REC recipe on several hosts with 8 GPUs each: run this on every host at about the same time.
#
#   on the first host:  NODE_RANK=0 MASTER_ADDR=10.0.0.1 NNODES=2 IMAGE=... DATA=... OUT=... multi-node.sh
#   on the second host: NODE_RANK=1 MASTER_ADDR=10.0.0.1 NNODES=2 IMAGE=... DATA=... OUT=... multi-node.sh
#
# Every host must run the same image (use the version tag or the digest, not a moving alias),
# see DATA at the same path, and write OUT to one shared file system: ZeRO-3 checkpoints are
# written by every rank, and --resume auto reads them back from all hosts.
set -euo pipefail

IMAGE=${IMAGE:?set IMAGE to a version tag or digest, the same on every host}
DATA=${DATA:?set DATA to the directory with the config, the model and the data set}
OUT=${OUT:?set OUT to a directory on a file system every host shares}
NNODES=${NNODES:-2}
NODE_RANK=${NODE_RANK:?set NODE_RANK: 0 on the host at MASTER_ADDR, 1 to NNODES-1 on the others}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the host with NODE_RANK=0}
MASTER_PORT=${MASTER_PORT:-29500}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
mkdir -p "$OUT"

# NCCL picks the first usable interface; on hosts with several, name the one the hosts reach
# each other on, for example: export NCCL_SOCKET_IFNAME=eth0 (or ib0, or ^docker0,lo to exclude).
# InfiniBand: export NCCL_IB_HCA=mlx5 to choose adapters; export NCCL_DEBUG=INFO to see what NCCL chose.
# `--env NAME` passes each one on only when it is set here.
#
# --network host: torchrun's rendezvous and NCCL connect to ports on every host directly.
# --ulimit memlock=-1: RDMA (InfiniBand, RoCE) registers pinned memory.
exec docker run --rm --gpus all --network host --ipc=host --shm-size=16g --ulimit memlock=-1 \
    --user "$(id -u):$(id -g)" \
    --env NCCL_SOCKET_IFNAME --env NCCL_IB_HCA --env NCCL_IB_DISABLE --env NCCL_DEBUG \
    -v "$DATA:/data:ro" -v "$OUT:/out" \
    "$IMAGE" train --config /data/qwen2_5_vl_3b_rec_zero3.yaml --deepspeed zero3 \
    --nproc-per-node "$GPUS_PER_NODE" --nnodes "$NNODES" --node-rank "$NODE_RANK" \
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --resume auto "$@"
