"""An FAQ import's `object_key` is exactly the form `faq/import/upload-url` gives: a key under the caller's
uploads that the key store would not take (`./`, a tab, a NUL, a backslash) answered 500 `internal_error`."""

from __future__ import annotations

import pytest

from .conftest import Api
from .test_faq import faq_kb


@pytest.mark.parametrize("tail", ["./x.csv", "a\tb.csv", "x\x00.csv", "x\\.\\y.csv", "../x.csv"])
def test_an_object_key_not_of_the_upload_urls_form_is_a_400(api: Api, tail: str) -> None:
    kb = faq_kb(api)
    grant = api.post(f"/knowledge-bases/{kb['id']}/faq/import/upload-url", {"file_name": "faq.csv"})
    assert grant.status_code == 201, grant.json_body
    uploads = grant.json_body["data"]["object_key"].rsplit("/", 1)[0] + "/"
    response = api.post(f"/knowledge-bases/{kb['id']}/faq/import", {"object_key": uploads + tail})
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == "invalid_object_key"
