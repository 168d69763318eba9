"""FlashAttention 4's kernels: compiled into the image at build (build.py, targets.json), and where a run finds
them (runtime.py). Imports nothing of vlmgrpo but itself: the image's build runs build.py before the trainer is
installed."""
