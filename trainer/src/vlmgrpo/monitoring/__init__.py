"""Watching a run: the per-step metrics (metrics.py), the stall and health policy behind /health (health.py), rank
0's /metrics and /health endpoint (exporter.py) and the Prometheus alert rules (alerts.py). Imports the leaves and
the packages below it (rewards, config, data, models, fa4kernels)."""
