"""FlashAttention 4's kernels: compiled into the image at build (build.py, targets.json), and where a run finds
them (runtime.py)."""
