"""The providers' zone cache: one listing per instance type per cache life, never a failed one kept."""

from __future__ import annotations

import pytest

from spotrun.providers.zone_cache import ZoneCache


class Listing:
    def __init__(self, *answers: list[str] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> list[str]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_zones_are_listed_once_per_life_and_again_after_it():
    now = [0.0]
    cache = ZoneCache(seconds=600.0, clock=lambda: now[0])
    listing = Listing(["a", "b"], ["b"])
    assert cache.zones("p3.2xlarge", listing) == ["a", "b"]
    now[0] = 599.0
    assert cache.zones("p3.2xlarge", listing) == ["a", "b"] and listing.calls == 1
    now[0] = 600.0
    assert cache.zones("p3.2xlarge", listing) == ["b"] and listing.calls == 2


def test_each_instance_type_has_its_own_entry():
    cache = ZoneCache(clock=lambda: 0.0)
    assert cache.zones("p3.2xlarge", Listing(["a"])) == ["a"]
    assert cache.zones("g4dn.xlarge", Listing(["b", "c"])) == ["b", "c"]
    assert cache.zones("p3.2xlarge", Listing()) == ["a"]


def test_a_failed_listing_is_not_kept_and_the_next_call_lists_again():
    cache = ZoneCache(clock=lambda: 0.0)
    listing = Listing(RuntimeError("throttled"), ["a"])
    with pytest.raises(RuntimeError, match="throttled"):
        cache.zones("p3.2xlarge", listing)
    assert cache.zones("p3.2xlarge", listing) == ["a"] and listing.calls == 2


def test_a_caller_changing_its_answer_does_not_change_the_cache():
    cache = ZoneCache(clock=lambda: 0.0)
    cache.zones("p3.2xlarge", Listing(["a", "b"])).remove("a")
    assert cache.zones("p3.2xlarge", Listing()) == ["a", "b"]
