"""Where a cloud prices a zone: the region (AWS, GCP) or location (Azure) a zone name is in, or, before a job has a
zone, the one its settings name. The clouds' list prices are per region, so every price list asks this first."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from spotrun.costs.catalog import UnknownPrice


@dataclass(frozen=True)
class ZoneNames:
    cloud: str  # as messages name it: "AWS"
    word: str  # what it prices by: "region" or "location"
    zone: re.Pattern[str]  # a zone name, whose group "region" is its region
    example: str  # "an AWS availability zone such as us-east-1a"
    settings: tuple[str, ...]  # environment variables naming the region of a job with no zone, first found wins

    def region_of(self, zone: str | None, environ: Mapping[str, str] = os.environ) -> str:
        """The region (location) of `zone`; with no zone, the first of `settings` set; UnknownPrice saying which is
        wrong or missing."""
        if zone:
            found = self.zone.fullmatch(zone)
            if found is None:
                raise UnknownPrice(f"{zone!r} is not {self.example}")
            return found["region"]
        for name in self.settings:
            if environ.get(name, "").strip():
                return environ[name].strip()
        raise UnknownPrice(f"no {self.cloud} {self.word} to price in: set {' or '.join(self.settings[:2])}")
