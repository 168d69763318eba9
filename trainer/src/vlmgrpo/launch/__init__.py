"""Launching a run: where a multi-host launch comes from (schedulers.py: the variables each scheduler hands its pods
or tasks) and the launch itself (torchrun.py: the launch plan, torchrun, its signals). Imports the leaves and the
packages below it (rewards, config, data, models, fa4kernels, monitoring)."""
