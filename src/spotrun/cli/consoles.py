"""Where the CLI's commands print: rich consoles that wrap lines at the terminal's width on a terminal only.

Elsewhere (a pipe, a file, Click's test runner) rich takes 80 columns and breaks every longer line there, mid-phrase
("on-demand \\nonly: …"): a script reading the output, or a person reading the file, gets broken lines. There a line
is printed whole, and a table as wide as it needs (`print_whole`); on a terminal too narrow for a table, its headers
wrap rather than its cells being cut.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

__all__ = ["CliConsole", "print_whole"]


class CliConsole(Console):
    """A rich Console whose `print` does not wrap lines when its output is not a terminal."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        if soft_wrap is None and not self.is_terminal:
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **options)


def print_whole(console: Console, table: Table) -> None:
    """Print a table on a terminal as wide as the terminal, and elsewhere (a pipe, a file) as wide as the table needs:
    rich would otherwise cut its cells to 80 columns, and a script reading the output would get "0.7…" for 0.762.

    On a terminal narrower than the table, rich cut cells the same way ("SUCCEED…", "$0.0…", a narrow column to
    nothing): there the table is narrowed without cutting a value (`_fit`), else printed whole, its lines wrapped by
    the terminal."""
    natural = Measurement.get(console, console.options.update(max_width=_UNBOUNDED), table).maximum
    if console.is_terminal and (natural <= console.width or _fit(console, table)):
        console.print(table)
        return
    Console(file=console.file, width=max(natural, console.width), no_color=console.no_color).print(table)


_UNBOUNDED = 10_000


def _fit(console: Console, table: Table) -> bool:
    """Narrow the table's columns to the console's width, breaking no word of a cell (no line of a `no_wrap`
    column's): each column gets that much, then shares what width is left, up to its cells' whole lines and its
    header, which wraps (or folds) within the column. With the table's padding, else without it; False when even so
    it is wider than the console."""
    options = console.options.update(max_width=_UNBOUNDED)
    floors, wants = [], []
    for column in table.columns:
        cells = [Measurement.get(console, options, cell) for cell in column.cells]
        lines = max((cell.maximum for cell in cells), default=1)
        floors.append(lines if column.no_wrap else max((cell.minimum for cell in cells), default=1))
        wants.append(max(lines, Measurement.get(console, options, column.header).maximum))
    for padding in (table.padding, (0, 0)):
        table.padding = padding
        for column, floor in zip(table.columns, floors):
            column.width, column.overflow, column.no_wrap = floor, "fold", False  # the header wraps, the cells fit
        left = console.width - Measurement.get(console, options, table).maximum
        if left >= 0:
            _share(left, list(zip(table.columns, wants)))
            return True
    return False


def _share(left: int, wants: list[tuple[Column, int]]) -> None:
    """Widen the columns towards the widths they want, a character each in turn (so that no header is left folded a
    letter a line while another takes it all), while any width is left."""
    while left > 0 and (short := [column for column, width in wants if (column.width or 0) < width]):
        for column in short[:left]:
            column.width = (column.width or 0) + 1
        left -= min(left, len(short))
