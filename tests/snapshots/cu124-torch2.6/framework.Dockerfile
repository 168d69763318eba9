# imagegen framework layer: torch 2.6.0 built for CUDA 12.4 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:a7bde2878c6daea0

# torch brings its own cuDNN 9.1.0.70 and NCCL 2.21.5 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.6.0 torchvision==0.21.0 --index-url https://download.pytorch.org/whl/cu124

COPY constraints.txt requirements.txt /etc/imagegen/

# The prebuilt flash-attn wheel for torch 2.6.0, CUDA 12, Python 3.11 and C++11 ABI FALSE;
# a wheel for another ABI fails at import with "undefined symbol".
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt https://github.com/Dao-AILab/flash-attention/releases/download/v2.7.4.post1/flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl

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
