"""The e2e tests each start a controller, agents and trainers: `make test` runs them one at a time (pytest-xdist's
`--dist loadgroup`, group "e2e"), or two of them share the 2 cores and take about twice as long each."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("e2e")


def test_make_tests_workers_keep_the_e2e_group_together(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("checks `make test`'s run: pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@e2e"), (
        "pytest-xdist ignored the xdist_group mark, so e2e tests run on both workers at once: this pytest and "
        "pytest-xdist do not work together (see the pin of pytest in pyproject.toml)"
    )
