"""Plain-text tables, for the listing and the summaries."""

from __future__ import annotations


def aligned(rows: list) -> list[str]:
    """Rows of text cells as lines with aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
