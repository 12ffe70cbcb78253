"""The value types of job-file fields, each with the check and the message for a bad value."""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo

from spotrun.limits import MAX_PRICE_PER_HOUR
from spotrun.spec.durations import MAX_DURATION_SECONDS, DurationTooLong, parse_duration
from spotrun.spec.values import describe

# The validation context of a spec read back from the store (`JobSpec.stored`): one stored before durations were
# capped (`durations.MAX_DURATION_SECONDS`) is still read, as its job must still be driven, cancelled and billed.
STORED = "stored"


_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ACCELERATOR = re.compile(r"(?P<name>[^:\s]+)(?::(?P<count>[^:]*))?")


def _non_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _job_name(text: str) -> str:
    if not _JOB_NAME.fullmatch(text):
        raise ValueError(
            f"must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit; got {describe(text)}"
        )
    return text


def _env_name(text: str) -> str:
    if not _ENV_NAME.fullmatch(text):
        raise ValueError(
            f"{describe(text)} is not a valid environment variable name "
            "(letters, digits and '_', not starting with a digit)"
        )
    return text


def _env_value(value: object) -> object:
    """Scalars become the text a shell would see; anything else is left for the string check to refuse."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if value is None or isinstance(value, dict | list):
        raise ValueError(f"must be a string, number or true/false; got {describe(value)}")
    return value


def _accelerators(value: object) -> object:
    """Text like "V100:2" or "V100" becomes {"V100": 2} or {"V100": 1}; a mapping is checked entry by entry later."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        match = _ACCELERATOR.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"must be like 'V100:1', 'V100' or a mapping like {{V100: 1}}; got {describe(value)}")
        count = match["count"]
        if count is None:
            return {match["name"]: 1}
        if not (count.isascii() and count.isdecimal()) or len(count) > 9 or int(count) < 1:  # "²" is a digit too
            raise ValueError(f"the count after ':' must be a whole number of at least 1; got {describe(value)}")
        return {match["name"]: int(count)}
    raise ValueError(f"must be like 'V100:1', 'V100' or a mapping like {{V100: 1}}; got {describe(value)}")


def _stored(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get(STORED))


def _longest(info: ValidationInfo) -> float:
    return math.inf if _stored(info) else MAX_DURATION_SECONDS


def _duration(value: object, info: ValidationInfo) -> float:
    return parse_duration(value, longest=_longest(info))


def _deadline(value: object, info: ValidationInfo) -> object:
    """An absolute moment (a datetime with a timezone) or seconds after launch (a duration)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return _with_timezone(value)
    if isinstance(value, date):
        raise ValueError(f"must be a date and time with a timezone like 2025-06-01T18:00:00Z; got {describe(value)}")
    if isinstance(value, str):
        try:
            return parse_duration(value, longest=_longest(info))
        except DurationTooLong:
            raise
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                "must be a date and time with a timezone like 2025-06-01T18:00:00Z, "
                f"or a duration after launch like 12h; got {describe(value)}"
            ) from None
        return _with_timezone(moment)
    return parse_duration(value, longest=_longest(info))


def _with_timezone(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"{moment.isoformat()} has no timezone; add one, like 2025-06-01T18:00:00Z or 2025-06-01T18:00:00+02:00"
        )
    return moment


def at_most(highest: int) -> AfterValidator:
    """A cap on new specs; a spec stored before it was set is read back as it was (`STORED`)."""

    def check(value: int, info: ValidationInfo) -> int:
        if value > highest and not _stored(info):
            raise ValueError(f"must be at most {highest:,}; got {describe(value)}")
        return value

    return AfterValidator(check)


def _price(value: float, info: ValidationInfo) -> float:
    if value > MAX_PRICE_PER_HOUR and not _stored(info):
        raise ValueError(f"must be at most {MAX_PRICE_PER_HOUR:,.0f} $/h; got {describe(value)}")
    return value


def at_least_seconds(lowest: float, why: str) -> AfterValidator:
    """A floor on new specs' durations; a spec stored before it was set is read back as it was (`STORED`)."""

    def check(seconds: float, info: ValidationInfo) -> float:
        if seconds < lowest and not _stored(info):
            raise ValueError(f"must be at least {lowest:g}s ({why}); got {seconds:g} s")
        return seconds

    return AfterValidator(check)


# Object stores whose URL names a bucket (or container) first: without one nothing can be stored there, which only the
# agent found out, on an instance already paid for (the launch checks know the protocol, not the URL's parts).
_NAMED_FIRST = {"s3": "bucket", "s3a": "bucket", "gs": "bucket", "gcs": "bucket",
                "az": "container", "abfs": "container", "abfss": "container"}


def _store_with_bucket(store: str, info: ValidationInfo) -> str:
    if _stored(info):
        return store
    url = store.split("::")[-1]  # a chained URL (simplecache::s3://bucket/x) stores in its last filesystem
    protocol, separator, path = url.partition("://")
    container = _NAMED_FIRST.get(protocol)
    if separator and container is not None and not path.partition("/")[0].strip():
        raise ValueError(f"{describe(store)} names no {container}; write it like {protocol}://{container.upper()}/path")
    return store


def _unique(items: list[str]) -> list[str]:
    repeated = sorted({item for item in items if items.count(item) > 1})
    if repeated:
        raise ValueError("lists " + ", ".join(describe(item) for item in repeated) + " more than once")
    return items


NonBlankStr = Annotated[str, AfterValidator(_non_blank)]
CheckpointStore = Annotated[str, AfterValidator(_non_blank), AfterValidator(_store_with_bucket)]
JobName = Annotated[str, AfterValidator(_job_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
EnvValue = Annotated[str, BeforeValidator(_env_value)]
Duration = Annotated[float, BeforeValidator(_duration)]
PositiveDuration = Annotated[float, BeforeValidator(_duration), Field(gt=0)]
AcceleratorCount = Annotated[int, Field(ge=1)]
Accelerators = Annotated[dict[NonBlankStr, AcceleratorCount], BeforeValidator(_accelerators), Field(min_length=1)]
Deadline = Annotated[datetime | float, BeforeValidator(_deadline)]
Price = Annotated[float, Field(gt=0, allow_inf_nan=False), AfterValidator(_price)]  # $/h
Zones = Annotated[list[NonBlankStr], Field(min_length=1), AfterValidator(_unique)]
