"""Job ids as the commands take them: positive whole numbers, as `spotrun status` shows them. One below 1 is a bad
argument (exit 2) naming the job id, not "no job with id 0" (exit 1), and a negative one is no "No such option: -1"
(Click takes a word that starts with "-" for an option)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

HELP = "job id, as `spotrun status` shows it"
_NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d*)?")


def not_a_job_id(given: object, **where: Any) -> typer.BadParameter:
    """The refusal of ``given`` as a job id; ``where``: BadParameter's ctx and param, where Click does not add them."""
    return typer.BadParameter(f"a job id is a positive whole number, as `spotrun status` shows it; got {given}", **where)


def positive_job_id(job_id: int | None) -> int | None:
    """The callback of every job id argument and option."""
    if job_id is not None and job_id < 1:
        raise not_a_job_id(job_id)
    return job_id


JobId = Annotated[int, typer.Argument(help=HELP, callback=positive_job_id, show_default=False)]
OptionalJobId = Annotated[Optional[int], typer.Argument(help=HELP, callback=positive_job_id, show_default=False)]


class JobIdCommand(TyperCommand):
    """A command whose argument is a job id (`JobId`, `OptionalJobId`): a negative number where Click would take it
    for an option (not as an option's value, nor after "--") is refused as that job id."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # Typer's own copy of click.Context
        takes_a_value = {name for param in self.params if param.param_type_name == "option" and not param.is_flag
                         for name in param.opts}
        for before, word in zip([None, *args], args):
            if word == "--":
                break
            if _NEGATIVE_NUMBER.fullmatch(word) and before not in takes_a_value:
                raise not_a_job_id(word, ctx=ctx, param=next(p for p in self.params if p.param_type_name == "argument"))
        return super().parse_args(ctx, args)
