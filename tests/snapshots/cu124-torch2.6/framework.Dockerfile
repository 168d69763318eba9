# imagegen framework layer: torch 2.6.0 built for CUDA 12.4 with the ML stack,
# installed from the image's lock (locks/cu124-torch2.6.json).
# Rendered from templates/framework.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/base:47047015d56ba8b3

# uv installs every step below: the same locked files as pip would, faster (bench/RESULTS.md, section 5).
# hadolint ignore=DL3042
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/installer.txt,target=/tmp/requirements/installer.txt \
    pip install --no-deps --require-hashes -r /tmp/requirements/installer.txt

# The CUDA libraries torch's wheels load (nvidia-*), a layer of their own below torch: an image with another
# torch but the same versions of these, on the same base and Python, shares this layer.
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/cuda-libraries.txt,target=/tmp/requirements/cuda-libraries.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/cuda-libraries.txt

# cuDNN 9.1.0.70 and NCCL 2.21.5, which change with torch's release as the libraries above change with the
# CUDA update: a layer apart, so that no layer holds over half of the image (a pull downloads layers side by side).
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/cudnn-nccl.txt,target=/tmp/requirements/cudnn-nccl.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/cudnn-nccl.txt

# torch, on the cuDNN 9.1.0.70 and NCCL 2.21.5 wheels it pins (above, or in this step); those are what it uses.
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/torch.txt,target=/tmp/requirements/torch.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/torch.txt

# Tools that compile the sources below against the installed torch.
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/build-tools.txt,target=/tmp/requirements/build-tools.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/build-tools.txt

# The prebuilt flash-attn wheel for torch 2.6.0, CUDA 12, Python 3.11 and the pre-C++11 ABI
# of this torch build; a wheel for another ABI fails at import with "undefined symbol". Its host could
# not be reached when the lock was made, so it is not hash-checked.
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/flash-attn.txt,target=/tmp/requirements/flash-attn.txt \
    --mount=type=bind,source=requirements/flash-attn-unhashed.txt,target=/tmp/requirements/flash-attn-unhashed.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/flash-attn.txt \
    && uv pip install --link-mode=copy --no-deps -r /tmp/requirements/flash-attn-unhashed.txt

# DeepSpeed; its ops compile just in time on first use (DS_BUILD_OPS=0).
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/deepspeed.txt,target=/tmp/requirements/deepspeed.txt \
    --mount=type=bind,source=requirements/deepspeed-sources.txt,target=/tmp/requirements/deepspeed-sources.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/deepspeed.txt \
    && DS_BUILD_OPS=0 uv pip install --link-mode=copy --no-deps --no-build-isolation --require-hashes -r /tmp/requirements/deepspeed-sources.txt

# The rest of the stack and the trainer's dependencies.
RUN --mount=type=cache,target=/root/.cache/uv,sharing=locked \
    --mount=type=secret,id=uv.toml,target=/etc/uv/uv.toml \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=requirements/stack.txt,target=/tmp/requirements/stack.txt \
    if [ -f /run/secrets/ca-bundle.crt ]; then export SSL_CERT_FILE=/run/secrets/ca-bundle.crt; fi \
    && uv pip install --link-mode=copy --no-deps --require-hashes -r /tmp/requirements/stack.txt

# What `vlmgrpo selftest` and `imagegen test` check the image against, and every distribution as the lock pins it.
# Installed by a RUN step, not COPY: the layer shell gives the files and their folder the layer's fixed time.
RUN --mount=type=bind,source=expected.json,target=/tmp/imagegen/expected.json \
    --mount=type=bind,source=requirements.lock,target=/tmp/imagegen/requirements.lock \
    install -D -m 0644 /tmp/imagegen/expected.json /etc/imagegen/expected.json \
    && install -D -m 0644 /tmp/imagegen/requirements.lock /etc/imagegen/requirements.lock
