"""A model's Retry-After is a finite, bounded wait: `inf` or `1e999` became float('inf') in the API's 503
`details.retry_after`, serialised as the bare token `Infinity`, which is not JSON (a reviewer's proof)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from chalicelib.adapters.models._common import parse_retry_after
from chalicelib.adapters.models.openai_compat import HttpResponse, OpenAIEmbedding
from chalicelib.api.http import error_response, in_envelope
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.services.embedding_runs import embed_for_api

DAY = 86_400.0  # the longest wait taken (`_common.MAX_RETRY_AFTER_SECONDS`)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "inf"}, DAY),
        ({"retry-after": "1e999"}, DAY),
        ({"retry-after": "1e300"}, DAY),
        ({"retry-after": "-inf"}, 0.0),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "inf"}, DAY),
        ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, DAY),
        ({"retry-after": "2.5"}, 2.5),
    ],
)
def test_a_wait_is_finite_and_bounded(headers: dict[str, str], expected: float | None) -> None:
    wait = parse_retry_after(headers)
    assert wait == expected
    assert wait is None or math.isfinite(wait)


def test_the_bound_is_a_day() -> None:
    from chalicelib.adapters.models._common import MAX_RETRY_AFTER_SECONDS

    assert MAX_RETRY_AFTER_SECONDS == DAY


def _no_constants(token: str) -> Any:
    raise ValueError(f"not JSON: {token}")


@pytest.mark.parametrize("value", ["inf", "1e999"])
def test_a_search_throttled_by_the_model_answers_json(deps: Services, value: str) -> None:
    class Throttling:
        def post_json(self, url: str, payload: Any, headers: Any, timeout: float) -> HttpResponse:
            return HttpResponse(429, b'{"error":{"code":"rate_limit"}}', {"retry-after": value})

    model = OpenAIEmbedding("m", base_url="http://models.example/v1", dimensions=4, transport=Throttling())
    with pytest.raises(ServiceUnavailable) as caught:
        embed_for_api(deps, "t1", model, ["a query"])
    response = in_envelope(None, error_response(caught.value))
    body = json.loads(response.body, parse_constant=_no_constants)
    assert body["error"]["details"]["retry_after"] == DAY
