# imagegen base layer for linux/amd64: ubuntu24.04 with Python 3.12 (system),
# a virtual environment in /opt/venv and the non-root user that runs training.
# Rendered from templates/base.Dockerfile.j2: edit the template, not this file.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_COMPILE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# The drivers the NVIDIA container toolkit starts this image on: nvidia/cuda's own rule (a driver of CUDA 12.8,
# or on datacenter GPUs the branches its cuda-compat serves), written again from matrix.yaml's cuda.12.8.driver
# (imagegen/matrix/drivers.py), so that its labels and `imagegen matrix --driver` say what it does.
ENV NVIDIA_REQUIRE_CUDA="cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=vapps,driver>=470,driver<471 brand=vpc,driver>=470,driver<471 brand=vcs,driver>=470,driver<471 brand=vws,driver>=470,driver<471 brand=cloudgaming,driver>=470,driver<471 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 brand=cloudgaming,driver>=550,driver<551 brand=unknown,driver>=560,driver<561 brand=grid,driver>=560,driver<561 brand=tesla,driver>=560,driver<561 brand=nvidia,driver>=560,driver<561 brand=quadro,driver>=560,driver<561 brand=quadrortx,driver>=560,driver<561 brand=nvidiartx,driver>=560,driver<561 brand=vapps,driver>=560,driver<561 brand=vpc,driver>=560,driver<561 brand=vcs,driver>=560,driver<561 brand=vws,driver>=560,driver<561 brand=cloudgaming,driver>=560,driver<561 brand=unknown,driver>=565,driver<566 brand=grid,driver>=565,driver<566 brand=tesla,driver>=565,driver<566 brand=nvidia,driver>=565,driver<566 brand=quadro,driver>=565,driver<566 brand=quadrortx,driver>=565,driver<566 brand=nvidiartx,driver>=565,driver<566 brand=vapps,driver>=565,driver<566 brand=vpc,driver>=565,driver<566 brand=vcs,driver>=565,driver<566 brand=vws,driver>=565,driver<566 brand=cloudgaming,driver>=565,driver<566"

# Every RUN step below runs through imagegen's layer shell (templates/layer-shell.sh): bash with pipefail, then what
# the step wrote given one fixed time, so that a layer is the same bytes from every build of the same inputs.
RUN --mount=type=bind,source=layer-shell.sh,target=/tmp/imagegen-layer-shell \
    /tmp/imagegen-layer-shell "install -m 0755 /tmp/imagegen-layer-shell /usr/local/bin/imagegen-layer-shell"
SHELL ["/bin/bash", "-o", "pipefail", "/usr/local/bin/imagegen-layer-shell"]

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
        python3-venv \
        python3-dev \
    && rm -rf /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log /var/cache/ldconfig/aux-cache

RUN python3.12 -m venv /opt/venv

# The InfiniBand/RoCE user space NCCL loads to use RDMA between hosts (libibverbs and its providers, such as mlx5;
# ibv_devinfo to look): without it NCCL falls back to TCP sockets. Same package names on Debian and Ubuntu.
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
    && apt-get install -y --no-install-recommends \
        ibverbs-providers \
        ibverbs-utils \
    && rm -rf /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log /var/cache/ldconfig/aux-cache

# What compiles CUDA kernels here: DeepSpeed. nvcc compiles only the device code and hands the
# host code to a C++ compiler, so g++ is here (vLLM's own Dockerfile installs one for its kernels' JIT too).
# hadolint ignore=DL3008
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    apt-get update \
    && apt-get install -y --no-install-recommends \
        g++ \
    && rm -rf /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log /var/cache/ldconfig/aux-cache

# uid 1000 is the usual first user on a host; Ubuntu 24.04 images already give it to "ubuntu".
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid 1000 --shell /bin/bash trainer
