"""A training run: its plan (plan.py) made once, the worker's start (started.py), the loop with our callbacks
(runner.py, callbacks.py, profiling.py), checkpoints and the output directory (checkpoint.py, output.py, storage.py),
what the machine must support (support.py, rollouts.py). Imports every package below it: the leaves, rewards,
config, data, models, fa4kernels, monitoring and launch."""
