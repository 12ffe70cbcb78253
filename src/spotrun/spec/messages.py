"""pydantic's validation errors, reworded for a person editing a YAML file."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from spotrun.pydantic_messages import error_message
from spotrun.spec.values import describe

_Rewording = Callable[[ErrorDetails], str]


def _got(error: ErrorDetails) -> str:
    return f"got {describe(error['input'])}"


def _unknown_field(model: type[BaseModel]) -> _Rewording:
    def reword(error: ErrorDetails) -> str:
        name = str(error["loc"][-1])
        known = _fields_at(model, error["loc"][:-1])
        close = difflib.get_close_matches(name, known, n=1) or _paths_named(model, name)[:1]
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field {name!r}{hint}"

    return reword


def _paths_named(model: type[BaseModel], name: str, prefix: str = "") -> list[str]:
    """The dotted paths of the fields called `name` in `model`'s nested models (`distributed.nodes` was meant as
    `resources.nodes`)."""
    found = []
    for field_name, field in model.model_fields.items():
        path = f"{prefix}{field_name}"
        if field_name == name and prefix:
            found.append(path)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found += _paths_named(field.annotation, name, f"{path}.")
    return found


_REWORDINGS: dict[str, _Rewording] = {
    "missing": lambda e: "field required",
    "string_type": lambda e: f"must be a string; {_got(e)}",
    "int_type": lambda e: f"must be a whole number; {_got(e)}",
    "int_from_float": lambda e: f"must be a whole number; {_got(e)}",
    "float_type": lambda e: f"must be a number; {_got(e)}",
    "finite_number": lambda e: f"must be a finite number; {_got(e)}",
    "bool_type": lambda e: f"must be true or false; {_got(e)}",
    "dict_type": lambda e: f"must be a mapping; {_got(e)}",
    "model_type": lambda e: f"must be a mapping of fields; {_got(e)}",
    "list_type": lambda e: f"must be a list; {_got(e)}",
    "too_short": lambda e: "must not be empty",
    "greater_than": lambda e: f"must be greater than {e['ctx']['gt']:g}; {_got(e)}",
    "greater_than_equal": lambda e: f"must be at least {e['ctx']['ge']:g}; {_got(e)}",
    "literal_error": lambda e: f"must be {e['ctx']['expected']}; {_got(e)}",
    "invalid_key": lambda e: f"field names must be strings; got {describe(e['loc'][-1])}",
    "value_error": error_message,
}


def reword(error: ErrorDetails, model: type[BaseModel]) -> str:
    """A readable message for one error from validating `model`; pydantic's own text when there is no better one."""
    if error["type"] == "extra_forbidden":
        return _unknown_field(model)(error)
    rewording = _REWORDINGS.get(error["type"])
    if rewording is None:
        message = error_message(error)
        return message[:1].lower() + message[1:]
    return rewording(error)


def _fields_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The field names of the nested model at `path` (empty when `path` does not lead to a model)."""
    current: Any = model
    for part in path:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return []
        current = field.annotation
    return list(current.model_fields)
