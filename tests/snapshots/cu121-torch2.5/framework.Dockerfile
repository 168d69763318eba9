# imagegen framework layer: torch 2.5.1 built for CUDA 12.1 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:f8029633387be32d

# torch brings its own cuDNN 9.1.0.70 and NCCL 2.21.5 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.5.1 torchvision==0.20.1 --index-url https://download.pytorch.org/whl/cu121

COPY constraints.txt requirements.txt /etc/imagegen/

# The prebuilt flash-attn wheel for torch 2.5.1, CUDA 12, Python 3.10 and C++11 ABI FALSE;
# a wheel for another ABI fails at import with "undefined symbol".
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.0.post2/flash_attn-2.7.0.post2+cu12torch2.5cxx11abiFALSE-cp310-cp310-linux_x86_64.whl

# DeepSpeed ops compile just in time on first use (DS_BUILD_OPS=0).
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    DS_BUILD_OPS=0 pip install -c /etc/imagegen/constraints.txt deepspeed==0.16.9

RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt -r /etc/imagegen/requirements.txt

# What `vlmgrpo selftest` checks the image against.
COPY expected.json /etc/imagegen/expected.json
