# imagegen trainer layer for cu130-torch2.11: the vlmgrpo trainer 0.1.0 and the entrypoint.
# Rendered from templates/trainer.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/framework:1329351f83b38670

# The framework layer installed the trainer's dependencies and build tools, so this step
# needs no index. The sources are mounted, not copied: only the installed packages land here. The contract
# (what imagegen and the image agree on: the inventory program, the check runner) is the one dependency no index holds.
# uv leaves its lock file /opt/venv/.lock writable by anyone (0666): the image's user must not hold the venv's lock.
RUN --mount=type=bind,source=contract,target=/src/contract,rw \
    --mount=type=bind,source=trainer,target=/src/trainer,rw \
    pip install --no-cache-dir --no-deps --no-build-isolation /src/contract /src/trainer \
    && rm -f /opt/venv/.lock

# Bytecode for what a run imports at start (trainer/src/vlmgrpo/commands/bytecode.py): the image's user cannot
# write it into /opt/venv, so without it every process compiled those sources again at each start. A build for another
# platform runs under QEMU, where torch cannot be imported: that image goes without, and compiles them at start.
ARG BUILDPLATFORM
ARG TARGETPLATFORM
RUN if [ "$TARGETPLATFORM" = "$BUILDPLATFORM" ]; then python -m vlmgrpo.commands.bytecode; fi

RUN --mount=type=bind,source=entrypoint.sh,target=/tmp/imagegen-entrypoint \
    install -m 0755 /tmp/imagegen-entrypoint /usr/local/bin/imagegen-entrypoint

# Docker's own shell again, for what users build FROM this image: the layer shell is for imagegen's steps.
SHELL ["/bin/sh", "-c"]

ENV IMAGEGEN_EXPECTED=/etc/imagegen/expected.json
# `vlmgrpo serve` listens on loopback unless told; a container's loopback is its own, so here it listens on every
# address, which `docker run -p` publishes: give it an API key (VLMGRPO_API_KEY) wherever others can reach the port.
ENV VLMGRPO_SERVE_HOST=0.0.0.0

# Numeric, so that Kubernetes runAsNonRoot can verify it; 1000 is the user "trainer".
USER 1000:1000
WORKDIR /home/trainer
ENTRYPOINT ["/usr/local/bin/imagegen-entrypoint"]
CMD ["info"]
