# The usual way to make the same image: one stage, as root, apt lists and pip's cache left in,
# the wheels copied into the image. bench/size.py builds it to compare sizes with the cpu image.
# Only the proxy's CA is mounted as a secret, so that pip can reach PyPI from this machine.
FROM local/debian:bookworm
RUN apt-get update && apt-get install -y python3 python3-venv python3-pip
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY wheelhouse /wheelhouse
ARG TORCH TORCHVISION
RUN --mount=type=secret,id=ca-bundle PIP_CERT=/run/secrets/ca-bundle \
    pip install --find-links /wheelhouse torch==$TORCH torchvision==$TORCHVISION
ARG TRANSFORMERS TRL ACCELERATE PEFT
RUN --mount=type=secret,id=ca-bundle PIP_CERT=/run/secrets/ca-bundle \
    pip install transformers==$TRANSFORMERS trl==$TRL accelerate==$ACCELERATE peft==$PEFT
COPY contract /contract
COPY trainer /trainer
RUN --mount=type=secret,id=ca-bundle PIP_CERT=/run/secrets/ca-bundle pip install /contract /trainer
ENTRYPOINT ["vlmgrpo"]
