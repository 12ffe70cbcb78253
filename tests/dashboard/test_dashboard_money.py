"""The dashboard's dollars (format.js) read as the CLI's (`ledger.format_dollars`): the sign before the dollar sign,
cents from a dollar up, halves away from zero. Run by node, so that no browser is needed."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

import spotrun.server.dashboard
from spotrun.costs.ledger import format_dollars

FORMAT_JS = Path(spotrun.server.dashboard.__file__).parent / "static" / "format.js"


def dashboard_dollars(amounts: list[float]) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the dashboard's number formatting is tested in Chromium only")
    script = (f"import {{ dollars }} from {json.dumps(FORMAT_JS.as_uri())};\n"
              f"console.log(JSON.stringify({json.dumps(amounts)}.map(dollars)));")
    ran = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_a_negative_saving_and_an_amount_that_rounds_to_a_dollar_read_as_the_cli_shows_them():
    amounts = [-12.345, 0.99996, 0.99994, 0.0, -0.00001, 1_234.5, 2.675, 0.03125]
    assert dashboard_dollars(amounts) == [
        "-$12.35", "$1.00", "$0.9999", "$0.00", "$0.0000", "$1,234.50", "$2.68", "$0.0313",
    ]


def test_the_dashboard_and_the_cli_show_every_amount_alike():
    rng = random.Random(7)
    amounts = [round(rng.uniform(-2, 2) * 10 ** rng.randint(-4, 5), rng.randint(2, 7)) for _ in range(3_000)]
    amounts += [0.99995, -0.99995, 0.9999499999, 1 - 1e-12]  # where cents begin
    amounts += [sign * (k + 0.5) / 10**places for sign in (1, -1) for k in range(200) for places in (2, 4)]  # halves
    assert dashboard_dollars(amounts) == [format_dollars(amount) for amount in amounts]
