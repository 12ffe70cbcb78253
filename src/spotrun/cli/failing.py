"""How a command says it cannot do what was asked: one red line on stderr, and the exit code to leave with.

The codes, alike in every command and in both modes (README's Commands): 1, the command could not do it (an unknown
job, a node the job does not have, a server error, ...); 2, a bad argument (a value no use could take, or a job file
with problems: Click's code for its own usage errors), named in the message, and nothing changed."""

from __future__ import annotations

import typer
from rich.markup import escape

from spotrun.cli.consoles import CliConsole

errors = CliConsole(stderr=True)

FAILED = 1
BAD_ARGUMENT = 2


def fail(message: str, code: int = FAILED) -> typer.Exit:
    """Print ``message`` as an error; the exit to raise."""
    errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def bad_argument(message: str) -> typer.Exit:
    """Print ``message``, which names the option or argument, as an error; the exit (2) to raise."""
    return fail(message, BAD_ARGUMENT)
