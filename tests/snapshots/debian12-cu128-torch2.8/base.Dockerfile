# imagegen base layer for linux/amd64: debian12 with Python 3.11 (system),
# a virtual environment in /opt/venv and the non-root user that runs training.
# Rendered from templates/base.Dockerfile.j2: edit the template, not this file.
FROM debian:bookworm-slim

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_COMPILE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# CUDA 12.8 comes from NVIDIA's wheels, not FROM nvidia/cuda. These are the variables NVIDIA's images set, so
# that the NVIDIA container toolkit mounts the driver and exposes the GPUs as it does for nvidia/cuda. Nothing here
# stands in for the host's libcuda (no cuda-compat), so NVIDIA_REQUIRE_CUDA admits what minor-version compatibility
# runs: any GPU, from driver 525.60.13 (matrix.yaml's cuda.12.8.driver, imagegen/matrix/drivers.py).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=12.8 driver>=525.60.13" \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 \
    PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:$PATH

# Keep downloaded packages in the cache mount instead of deleting them after each install.
RUN rm -f /etc/apt/apt.conf.d/docker-clean \
    && echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' > /etc/apt/apt.conf.d/keep-cache

# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
    && apt-get install -y --no-install-recommends \
        ca-certificates \
        python3 \
        python3-venv

RUN python3.11 -m venv /opt/venv

# The InfiniBand/RoCE user space NCCL loads to use RDMA between hosts (libibverbs and its providers, such as mlx5;
# ibv_devinfo to look): without it NCCL falls back to TCP sockets. Same package names on Debian and Ubuntu.
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
    && apt-get install -y --no-install-recommends \
        ibverbs-providers \
        ibverbs-utils

# uid 1000 is the usual first user on a host; Ubuntu 24.04 images already give it to "ubuntu".
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid 1000 --shell /bin/bash trainer
