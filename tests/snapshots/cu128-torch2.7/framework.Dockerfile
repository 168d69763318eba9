# imagegen framework layer: torch 2.7.1 built for CUDA 12.8 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:a8ba45b7fbe7a680

# torch brings its own cuDNN 9.7.1.26 and NCCL 2.26.2 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.7.1 torchvision==0.22.1 --index-url https://download.pytorch.org/whl/cu128

COPY constraints.txt requirements.txt /etc/imagegen/

# The prebuilt flash-attn wheel for torch 2.7.1, CUDA 12, Python 3.12 and C++11 ABI TRUE;
# a wheel for another ABI fails at import with "undefined symbol".
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/flash_attn-2.8.3+cu12torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl

# DeepSpeed ops compile just in time on first use (DS_BUILD_OPS=0).
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    DS_BUILD_OPS=0 pip install -c /etc/imagegen/constraints.txt deepspeed==0.19.8

RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt -r /etc/imagegen/requirements.txt

# What `vlmgrpo selftest` checks the image against.
COPY expected.json /etc/imagegen/expected.json
