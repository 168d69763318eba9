"""Platforms an image is built for, and how each is named in tags, wheels and file names."""

from __future__ import annotations

DEFAULT = "linux/amd64"  # its images keep the plain names and tags
ARCH = {"linux/amd64": "amd64", "linux/arm64": "arm64"}  # in tags and file names
MACHINE = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}  # in wheel tags and `uname -m`
PLATFORM_OF_MACHINE = {machine: platform for platform, machine in MACHINE.items()} | {"arm64": "linux/arm64"}


INDEX = "index"  # stands for every platform of an image: its multi-platform index


def suffix(platform: str) -> str:
    """A platform image's local tags and names carry its arch, but the default platform's: in a
    registry the plain tag is the multi-platform index."""
    return "" if platform == DEFAULT else f"-{ARCH.get(platform, platform)}"


def arch_tag(tag: str, platform: str) -> str:
    """The tag a platform image of a multi-platform image is pushed under: 0.1.0-...-3f2a9c1d4e5b-arm64."""
    return f"{tag}-{ARCH[platform]}"


def without_arch(tag: str) -> str:
    """The tag before the arch that `suffix` or `arch_tag` appended, or the tag itself."""
    for arch in ARCH.values():
        if tag.endswith(f"-{arch}"):
            return tag[:-len(arch) - 1]
    return tag


def key(image: str, platform: str) -> str:
    """The image and platform, as names of files and report rows: cpu, cpu-arm64."""
    return image + suffix(platform)
