"""The command line, the top of the pipeline: it may import every package of imagegen."""

from imagegen.cli.main import main

__all__ = ["main"]
