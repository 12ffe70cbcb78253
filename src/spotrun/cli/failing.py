"""How a command says it cannot do what was asked: one red line on stderr, and the exit code to leave with."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

errors = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``message`` as an error; the exit to raise."""
    errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)
