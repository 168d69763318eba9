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
    && rm -rf /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log /var/cache/ldconfig/aux-cache

RUN python3.11 -m venv /opt/venv

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

# uid 1000 is the usual first user on a host; Ubuntu 24.04 images already give it to "ubuntu".
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid 1000 --shell /bin/bash trainer
