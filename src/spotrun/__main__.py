"""`python -m spotrun`: the `spotrun` command, for an environment whose scripts folder is not on PATH."""

from spotrun.cli.main import app

app(prog_name="spotrun")
