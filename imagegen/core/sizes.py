"""Sizes as people write them in matrix.yaml ("7GB", "6.5GiB") and read them in reports."""

from __future__ import annotations

import humanfriendly


def parse(text: str) -> int:
    """Bytes in `text`: GB, MB are powers of 1000, GiB, MiB of 1024; ValueError when it is no size."""
    try:
        size = humanfriendly.parse_size(text)
    except humanfriendly.InvalidSize:
        raise ValueError(f"{text!r} is not a size") from None
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return int(size)


def human(size: int) -> str:
    return humanfriendly.format_size(size)
