# imagegen trainer layer for cu126-torch2.7: the vlmgrpo trainer 0.1.0 and the entrypoint.
# Rendered from templates/trainer.Dockerfile.j2: edit the template, not this file.
FROM imagegen-layer/framework:be8d2d9db1900212

# The source is mounted, not copied: only the installed package lands in the layer.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    --mount=type=secret,id=pip.conf,target=/etc/pip.conf \
    --mount=type=secret,id=ca-bundle,target=/run/secrets/ca-bundle.crt \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    --mount=type=bind,source=trainer,target=/src/trainer,rw \
    pip install -c /etc/imagegen/constraints.txt /src/trainer

COPY entrypoint.sh /usr/local/bin/imagegen-entrypoint

ENV IMAGEGEN_EXPECTED=/etc/imagegen/expected.json

# Numeric, so that Kubernetes runAsNonRoot can verify it; 1000 is the user "trainer".
USER 1000:1000
WORKDIR /home/trainer
ENTRYPOINT ["/usr/local/bin/imagegen-entrypoint"]
CMD ["info"]
