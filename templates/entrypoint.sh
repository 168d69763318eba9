#!/bin/sh
# imagegen entrypoint: `train`, `sft`, `merge`, `score`, `eval`, `serve`, `info`, `selftest` and `make-tiny` run
# the vlmgrpo trainer; any other command (bash, python ...) runs as given.
set -e

# `docker run --user UID:GID` gives a uid without a home directory: every cache of the
# stack (Hugging Face, torch extensions, triton, matplotlib) needs a writable one.
if [ ! -w "${HOME:-/nonexistent}" ]; then
    HOME="$(mktemp -d /tmp/home.XXXXXX)"
    export HOME
fi
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$HOME/.cache}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$XDG_CACHE_HOME/torch_extensions}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$XDG_CACHE_HOME/triton}"
export MPLCONFIGDIR="${MPLCONFIGDIR:-$XDG_CACHE_HOME/matplotlib}"

# On a GPU host, a driver older than the image needs is said in one line before training starts.
case "${1:-}" in
    train|sft|selftest)
        if [ -r /proc/driver/nvidia/version ]; then python -m vlmgrpo.driver || exit 1; fi ;;
esac

case "${1:-}" in
    train|sft|merge|score|eval|serve|info|selftest|make-tiny) exec vlmgrpo "$@" ;;
esac
exec "$@"
