# imagegen framework layer: torch 2.7.1 built for CUDA 12.6 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:08460159a2e197f7

# torch brings its own cuDNN 9.5.1.17 and NCCL 2.26.2 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.7.1 torchvision==0.22.1 --index-url https://download.pytorch.org/whl/cu126

COPY constraints.txt requirements.txt /etc/imagegen/

# The prebuilt flash-attn wheel for torch 2.7.1, CUDA 12, Python 3.12 and C++11 ABI TRUE;
# a wheel for another ABI fails at import with "undefined symbol".
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.0.post2/flash_attn-2.8.0.post2+cu12torch2.7cxx11abiTRUE-cp312-cp312-linux_x86_64.whl

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
