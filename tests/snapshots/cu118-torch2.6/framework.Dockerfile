# imagegen framework layer: torch 2.6.0 built for CUDA 11.8 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:b6dc7d4672c1ab64

# torch brings its own cuDNN 9.1.0.70 and NCCL 2.21.5 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.6.0 torchvision==0.21.0 --index-url https://download.pytorch.org/whl/cu118

COPY constraints.txt requirements.txt /etc/imagegen/

# Build tools for the extensions compiled below; no GPU is visible in a build, so the
# architectures come from TORCH_CUDA_ARCH_LIST.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt setuptools wheel ninja packaging psutil

# No prebuilt flash-attn wheel fits this torch/CUDA/Python: compile it. MAX_JOBS bounds the RAM.
ARG MAX_JOBS=4
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    MAX_JOBS="$MAX_JOBS" TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0+PTX" FLASH_ATTENTION_FORCE_BUILD=TRUE pip install --no-build-isolation -c /etc/imagegen/constraints.txt flash-attn==2.7.4.post1

# DeepSpeed ops compile just in time on first use (DS_BUILD_OPS=0).
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    DS_BUILD_OPS=0 pip install -c /etc/imagegen/constraints.txt deepspeed==0.18.9

RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt -r /etc/imagegen/requirements.txt

# What `vlmgrpo selftest` checks the image against.
COPY expected.json /etc/imagegen/expected.json
