#!/bin/sh
# imagegen entrypoint: `train`, `sft`, `merge`, `score`, `eval`, `serve`, `vllm-serve`, `lab`, `info`, `selftest`
# and `make-tiny` run the vlmgrpo trainer; any other command (bash, python ...) runs as given.
#
# Nothing is set up here that the commands need: pyxis/enroot and Apptainer's `exec` skip an
# ENTRYPOINT, so `vlmgrpo` itself makes HOME and the caches writable for any uid and checks the
# NVIDIA driver. Other commands get the same HOME and caches through `python -m vlmgrpo.image.environment`.
set -e
case "${1:-}" in
    train|sft|merge|score|eval|serve|vllm-serve|lab|info|selftest|make-tiny) exec vlmgrpo "$@" ;;
esac
exec python -m vlmgrpo.image.environment "$@"
