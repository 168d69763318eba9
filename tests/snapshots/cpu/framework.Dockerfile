# imagegen framework layer: torch 2.14.1 built for CUDA 13.0 with the ML stack.
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:5f9b31c98c3ed763

# torch brings its own cuDNN 9.24.0.43 and NCCL 2.30.7 as wheels; those are what it uses.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install torch==2.14.1 torchvision==0.29.1

COPY constraints.txt requirements.txt /etc/imagegen/

RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip install -c /etc/imagegen/constraints.txt -r /etc/imagegen/requirements.txt

# What `vlmgrpo selftest` checks the image against.
COPY expected.json /etc/imagegen/expected.json
