"""The billed input tokens Bedrock reports in a response header: a value that is not a short run of ASCII digits
is no count (None). `str.isdigit` takes '²' and other digit characters int() refuses, and int() refuses a value
of more than 4,300 digits: either was a ValueError out of a paid call."""

from __future__ import annotations

import pytest

from chalicelib.adapters.models.bedrock import INPUT_TOKENS_HEADER, _header_input_tokens


def _response(value: str) -> dict[str, object]:
    return {"ResponseMetadata": {"HTTPHeaders": {INPUT_TOKENS_HEADER: value}}}


@pytest.mark.parametrize("value", ["\xb2", "\u0663", "9" * 5000, "1e3", "-3", ""])
def test_a_header_that_is_no_count_is_none(value: str) -> None:
    assert _header_input_tokens(_response(value)) is None


def test_a_count_is_read() -> None:
    assert _header_input_tokens(_response(" 1234 ")) == 1234
