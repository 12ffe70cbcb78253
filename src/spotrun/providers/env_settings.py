"""A provider's settings from SPOTRUN_<CLOUD>_<FIELD> variables, then from arguments: one rule for every provider.

A variable's text is read by its field's declared type: `bool` as true/false (1/0, yes/no), `int` and `float` as
numbers, a `tuple` as a comma-separated list; a field may have a reader of its own (e.g. zone=subnet pairs). An
argument that is None leaves the variable's value standing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
Reader = Callable[[str, str], Any]  # (variable, text) -> value


def settings_values(
    settings_class: type, prefix: str, provider: str, environ: Mapping[str, str], overrides: Mapping[str, Any],
    readers: Mapping[str, Reader] | None = None,
) -> dict[str, Any]:
    """The values for `settings_class(**values)`: its fields' variables read, then `overrides`; TypeError naming
    any override that is no field of it."""
    fields = {field.name: field for field in dataclasses.fields(settings_class)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise TypeError(f"unknown {provider} provider option(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        variable = prefix + name.upper()
        raw = environ.get(variable)
        if raw:
            read = (readers or {}).get(name)
            values[name] = read(variable, raw) if read else read_as(variable, str(field.type), raw)
    values.update({name: value for name, value in overrides.items() if value is not None})
    return values


def read_as(variable: str, declared: str, raw: str) -> Any:
    """`raw` read as the declared type (its annotation's text)."""
    if declared.startswith("tuple"):
        return comma_list(variable, raw)
    if declared == "bool":
        if raw.strip().lower() not in BOOLEANS:
            raise ValueError(f"{variable} must be true or false, got {raw!r}")
        return BOOLEANS[raw.strip().lower()]
    if declared.startswith(("int", "float")):
        try:
            return int(raw) if declared.startswith("int") else float(raw)
        except ValueError:
            raise ValueError(f"{variable} must be a number, got {raw!r}") from None
    return raw


def comma_list(variable: str, raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def key_value_pairs(variable: str, raw: str, what: str = "KEY=VALUE") -> tuple[tuple[str, str], ...]:
    """"a=1, b=2" as (("a", "1"), ("b", "2")); ValueError naming the variable for a part without "=" or a side."""
    pairs = []
    for part in comma_list(variable, raw):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"{variable} must be {what} pairs separated by commas, got {part!r}")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)
