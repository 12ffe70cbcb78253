"""The class of every `spotrun` command group: its help lists each command's summary as one paragraph.

Typer's rich help keeps the single line breaks of a command's first paragraph in a group's listing (its own help
joins them): a docstring written over several lines read "admins made and" / "unmade, tokens ..." at any width.
"""

from __future__ import annotations

import inspect

import click
from typer.core import TyperGroup

__all__ = ["CommandGroup"]


class CommandGroup(TyperGroup):
    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for command in self.commands.values():
            if command.short_help is None and command.help:
                command.short_help = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        super().format_help(ctx, formatter)
