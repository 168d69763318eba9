"""Benchmarks: build cache reuse, image size, trainer overhead and render time.

Run `.venv/bin/python -m bench` from the repository root; it rewrites bench/RESULTS.md.
Benchmarks are not tests: CI does not run them.
"""
