"""The imagegen command line: the group and its commands (imagegen.cli.images, imagegen.cli.stages)."""

from __future__ import annotations

import click

import imagegen.cli.images as images
import imagegen.cli.stages as stages


@click.group()
@click.version_option(package_name="imagegen")
def main():
    """Build GPU training images you can trust from one compatibility matrix.

    matrix.yaml lists what exists (CUDA bases, torch builds, flash-attn wheels) and the
    images to publish. Every command validates it first. Select images with --cuda,
    --torch, --python, --image or --all; the filters combine with AND.

    \b
    Examples:
      imagegen validate
      imagegen matrix --format table
      imagegen render --cuda 12.4 --out build/contexts
      imagegen build --cuda 12.4 --push --registry ghcr.io/acme
    """




for command in (images.validate, images.matrix, images.render, images.lock, images.facts, stages.build,
                stages.test_command, stages.push, stages.sbom_command, stages.report, stages.verify_command):
    main.add_command(command)
