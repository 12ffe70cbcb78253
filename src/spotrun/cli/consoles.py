"""Where the CLI's commands print: rich consoles that wrap lines at the terminal's width on a terminal only.

Elsewhere (a pipe, a file, Click's test runner) rich takes 80 columns and breaks every longer line there, mid-phrase
("on-demand \\nonly: …"): a script reading the output, or a person reading the file, gets broken lines. There a line
is printed whole, and a table as wide as it needs (`print_whole`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

__all__ = ["CliConsole", "print_whole"]


class CliConsole(Console):
    """A rich Console whose `print` does not wrap lines when its output is not a terminal."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **options: Any) -> None:
        if soft_wrap is None and not self.is_terminal:
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **options)


def print_whole(console: Console, table: Table) -> None:
    """Print a table on a terminal as wide as the terminal, and elsewhere (a pipe, a file) as wide as the table needs:
    rich would otherwise cut its cells to 80 columns, and a script reading the output would get "0.7…" for 0.762."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    Console(file=console.file, width=max(natural, console.width), no_color=console.no_color).print(table)
