"""The command line, the top of imagegen: the group and its commands (main), the commands on the plan
(images: validate, matrix, render, lock, facts) and on images (stages: build, test, push, sbom, report), and
their shared options (options). It may import every package of imagegen."""

from imagegen.cli.main import main

__all__ = ["main"]
