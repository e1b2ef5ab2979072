"""A redirect whose Location cannot be parsed as a URL (an unbalanced IPv6 bracket) is a refused target:
a permanent FetchError with the refusal's code and none of the server's text, not a ValueError that the
docreader takes for a bug and retries on every try of its message."""

import pytest

from chalicelib.net import AllowList, FetchError, SafeHttpClient, fetch_url_document

LOOPBACK = AllowList.parse("127.0.0.0/8:*")


@pytest.mark.parametrize("location", ["http://[SECRET-host/x", "//[::1/SECRET"])
def test_a_redirect_to_an_unparsable_location_is_refused_for_good(server, location: str) -> None:
    server.redirect("/moved", location)
    for fetch in (
        lambda: SafeHttpClient(LOOPBACK).get(server.url("/moved")),
        lambda: fetch_url_document(server.url("/moved"), LOOPBACK),
    ):
        with pytest.raises(FetchError) as refused:
            fetch()
        assert refused.value.permanent and refused.value.code == "ssrf_blocked"
        assert "SECRET" not in refused.value.message and refused.value.__cause__ is None
