"""A `cursor` of nested brackets is 400 `invalid_cursor`, refused before it is parsed.

Regression (found by an audit): both listings' cursors were json.loads'ed as they came, so a cursor of a
few thousand `[` (its base64 fits a query string) raised RecursionError: 500 internal_error."""

from __future__ import annotations

import base64

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import BadRequest
from chalicelib.operations import knowledge_bases, listing
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"


def _cursor(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("raw", [b"[" * 3000, b'{"a":' * 3000, b"[[[" + b"]" * 3, b"[1]", b"\xff\xfe", b"!"])
@pytest.mark.parametrize("decode", [listing._decode, knowledge_bases._decode])
def test_a_cursor_that_no_listing_wrote_is_invalid(raw: bytes, decode: object) -> None:
    with pytest.raises(BadRequest) as raised:
        decode(_cursor(raw), "f")  # type: ignore[operator]
    assert raised.value.code == "invalid_cursor"


def test_the_listings_own_cursors_still_decode() -> None:
    assert listing._decode(listing._encode(("2024-01-01T00:00:00Z", "k1"), "f"), "f") == (
        "2024-01-01T00:00:00Z",
        "k1",
    )
    own = knowledge_bases._encode(knowledge_bases.OWN, ["handbook", "kb1"], "f")
    assert knowledge_bases._decode(own, "f") == (knowledge_bases.OWN, ["handbook", "kb1"])


def test_a_deeply_nested_cursor_is_answered_400(deps: Services, client: Client) -> None:
    _, key = create_tenant_with_key(deps, "acme")
    kb_id = client.http.post(
        f"{V1}/knowledge-bases",
        headers={"X-API-Key": key, "Content-Type": "application/json"},
        body=b'{"name": "kb"}',
    ).json_body["data"]["id"]
    cursor = _cursor(b"[" * 1500)
    for path in (
        f"{V1}/knowledge-bases?cursor={cursor}",
        f"{V1}/knowledge-bases/{kb_id}/knowledge?cursor={cursor}",
    ):
        answer = client.http.get(path, headers={"X-API-Key": key})
        assert answer.status_code == 400, (path, answer.body)
        assert answer.json_body["error"]["code"] == "invalid_cursor"
