"""A training run: its plan (plan.py), the launch (torchrun, schedulers' variables), TRL's GRPO and SFT trainers with
our callbacks, checkpoints, metrics, the /health endpoint and alert rules. Imports every package below it: the
leaves, rewards, config, data and models."""
