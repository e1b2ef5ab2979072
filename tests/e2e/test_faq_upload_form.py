"""An FAQ import's upload through the public path: the upload URL is a presigned form (POST) bound to the
import's file limit, posted with `requests` to moto's S3, then imported by the faq-import worker. moto (server
mode) does not check a form's policy (`content-length-range`, /tmp probe: a body over it is stored, 204),
AWS does (400 EntityTooLarge): so a bigger upload that storage takes is refused by the import, and deleted."""

from __future__ import annotations

from typing import Any

import requests

from chalicelib.bootstrap import Services
from chalicelib.faq.rows import MAX_FILE_BYTES
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_faq import faq_kb, search, start, task

CSV = b"question,answers\nWhere is the harbour?,Down the estuary road.\n"
BIG = b"question,answers\n" + b"q,a\n" * (MAX_FILE_BYTES // 4)  # a valid CSV, just over the limit


def _grant(api: Api, kb_id: str) -> dict[str, Any]:
    granted = api.post(f"/knowledge-bases/{kb_id}/faq/import/upload-url", {"file_name": "faq.csv"})
    assert granted.status_code == 201, granted.json_body
    data = dict(granted.json_body["data"])
    assert data["method"] == "POST" and data["max_size"] == MAX_FILE_BYTES, data
    return data


def _post(grant: dict[str, Any], body: bytes) -> requests.Response:
    """The form as a browser sends it: the grant's fields as they are, the file last."""
    return requests.post(grant["url"], data=grant["fields"], files={"file": ("faq.csv", body)}, timeout=60)


def test_a_file_posted_through_the_upload_form_is_imported(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = faq_kb(api)
    grant = _grant(api, kb["id"])
    assert _post(grant, CSV).status_code == 204
    task_id = start(api, kb["id"], {"object_key": grant["object_key"]})
    runtime.drain(timeout=300)
    view = task(api, task_id)
    assert view["status"] == "completed" and view["progress"]["added"] == 1, view
    assert search(api, kb["id"], "harbour")[0]["answers"] == ["Down the estuary road."]
    assert not services.inbox.exists(services.inbox.url_for(grant["object_key"]))


def test_an_upload_over_the_limit_is_refused_and_deleted(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = faq_kb(api)
    grant = _grant(api, kb["id"])
    url = services.inbox.url_for(grant["object_key"])
    posted = _post(grant, BIG)
    if posted.status_code == 400:  # storage held the form to its policy, as S3 does
        assert not services.inbox.exists(url)
        return
    assert posted.status_code == 204 and services.inbox.size(url) == len(BIG)  # moto took it
    refused = api.post(f"/knowledge-bases/{kb['id']}/faq/import", {"object_key": grant["object_key"]})
    assert refused.status_code == 413 and refused.json_body["error"]["code"] == "import_file_too_large"
    assert not services.inbox.exists(url)


def test_an_upload_replaced_by_a_bigger_one_after_the_start_fails_the_import_and_is_deleted(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The form still works after the import started (until it expires): where storage takes a bigger body,
    the worker refuses it by its length, before reading it, with the reason's code."""
    kb = faq_kb(api)
    grant = _grant(api, kb["id"])
    assert _post(grant, CSV).status_code == 204
    task_id = start(api, kb["id"], {"object_key": grant["object_key"]})
    if _post(grant, BIG).status_code == 400:  # storage held the form to its policy, as S3 does
        return
    runtime.drain(timeout=300)
    view = task(api, task_id)
    assert view["status"] == "failed", view
    assert view["progress"]["error_code"] == "import_file_too_large", view["progress"]
    assert not services.inbox.exists(services.inbox.url_for(grant["object_key"]))
    assert api.get(f"/knowledge-bases/{kb['id']}/faq/entries").json_body["data"]["items"] == []
