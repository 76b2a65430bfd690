"""The layout of plot-stats' figure: its grid of panels and its size in pixels (pure)."""

from __future__ import annotations

import math

PANEL_INCHES = (4.0, 3.0)
"""Width and height of one panel, in inches."""


def grid_shape(panels: int, columns: int = 3) -> tuple[int, int]:
    """``(columns, rows)`` of the panel grid: the fewest rows, then the fewest empty cells.

    At most `columns` per row; 4 panels make 2 rows of 2, not a row of 3 and a row
    of 1 with two empty cells.

    Examples:
        >>> grid_shape(1), grid_shape(3), grid_shape(4), grid_shape(5), grid_shape(7, columns=2)
        ((1, 1), (3, 1), (2, 2), (3, 2), (2, 4))
    """
    if panels < 1 or columns < 1:
        msg = f"'panels' and 'columns' must be >= 1; got panels={panels}, columns={columns}"
        raise ValueError(msg)
    rows = math.ceil(panels / columns)
    return math.ceil(panels / rows), rows


def image_size(panels: int, columns: int = 3, dpi: int = 100) -> tuple[int, int]:
    """Width and height in pixels of the PNG `plot_stats` writes.

    Examples:
        >>> image_size(5), image_size(2, dpi=50)
        ((1200, 600), (400, 150))
    """
    cols, rows = grid_shape(panels, columns)
    return round(cols * PANEL_INCHES[0] * dpi), round(rows * PANEL_INCHES[1] * dpi)


MAX_SIDE_PIXELS = 16384
"""The widest and tallest image `plot_stats` draws, in pixels (a panel at 100 dpi: 400 x 300)."""


def check_image_size(panels: int, columns: int, dpi: int) -> tuple[int, int]:
    """The image size (`image_size`); a ValueError naming the dpi that fits if too large.

    Examples:
        >>> check_image_size(4, 3, 100)
        (800, 600)
        >>> check_image_size(4, 3, 20000)
        Traceback (most recent call last):
        ValueError: dpi 20000 makes a 160000x120000-pixel image of 4 panels; the most is 16384 pixels a side: use a dpi of 2048 or less (or fewer columns)
    """
    width, height = image_size(panels, columns, dpi)
    if max(width, height) > MAX_SIDE_PIXELS:
        cols, rows = grid_shape(panels, columns)
        most = int(MAX_SIDE_PIXELS // max(cols * PANEL_INCHES[0], rows * PANEL_INCHES[1]))
        msg = (
            f"dpi {dpi} makes a {width}x{height}-pixel image of {panels} panels; the most "
            f"is {MAX_SIDE_PIXELS} pixels a side: use a dpi of {most} or less (or fewer columns)"
        )
        raise ValueError(msg)
    return width, height


__all__ = ["MAX_SIDE_PIXELS", "PANEL_INCHES", "check_image_size", "grid_shape", "image_size"]
