"""pydantic's words for a refusal, as spotrun shows them (`spotrun.pydantic_messages`): a validator's own message
without the prefix pydantic puts before it, every other message as pydantic wrote it."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from spotrun.pydantic_messages import error_message


class Checked(BaseModel):
    url: str = "http://x"
    port: int = 1

    @field_validator("url")
    @classmethod
    def _a_url(cls, value: str) -> str:
        if value == "assert":
            raise AssertionError("must be asserted")  # as an `assert` in a validator (not rewritten by pytest)
        if not value.startswith("http"):
            raise ValueError("must be a URL starting with http://")
        return value


@pytest.mark.parametrize(("fields", "message"), [
    ({"url": "trainbox:8080"}, "must be a URL starting with http://"),  # was "Value error, must be a URL ..."
    ({"url": "assert"}, "must be asserted"),  # was "Assertion failed, must be asserted"
    ({"port": "eighty"}, "Input should be a valid integer, unable to parse string as an integer"),
])
def test_a_validators_words_lose_pydantics_prefix_and_the_rest_are_kept(fields, message):
    with pytest.raises(ValidationError) as invalid:
        Checked(**fields)
    assert error_message(invalid.value.errors()[0]) == message
