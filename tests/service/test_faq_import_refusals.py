"""An FAQ import's refusals and its failed rows' link, on the in-memory adapters: an uploaded JSON entry
naming a key twice fails that row alone (a repeat in the file's own top-level object still refuses the
file), and the failed-rows CSV is handed out as a download grant (`/r/{token}`, minted per request, for
`download_url_seconds`) that ends with the key or the share that minted it; a task or a last result
stored with a presigned link before grants answers a fresh grant instead."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import IssueKeyRequest
from chalicelib.domain import strict_json
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations import admin
from chalicelib.operations.tenants import create_tenant_with_key

from .faq_support import CountingEmbedding
from .test_faq import BASE_URL, download, drain, entries_of, entry, task_view

V1 = "/api/v1"


def import_uploaded_json(deps: Services, kb: KnowledgeBase, text: str) -> dict[str, Any]:
    """`text` uploaded as faq.json and imported: the task's view."""
    from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.uploads import upload_url

    grant = upload_url(deps, kb.tenant_id, kb.id, FaqUploadUrlRequest(file_name="faq.json"))
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    inbox.post_presigned(grant["fields"], text.encode())
    task = start_import(deps, kb.tenant_id, kb.id, FaqImportRequest(object_key=grant["object_key"]))
    drain(deps)
    stored = deps.tasks.get(task.id)
    assert stored is not None
    return stored.to_dict()


def test_an_entry_naming_a_key_twice_fails_alone(deps: Services, faq_kb: KnowledgeBase) -> None:
    text = (
        '[{"standard_question": "Opening hours", "answers": ["9 to 5"]},'
        ' {"standard_question": "Parking", "answers": ["on the left"], "answers": ["on the right"]},'
        ' {"standard_question": "Wifi", "answers": ["guest123"], "tags": [{"x": 1, "x": 2}]},'
        ' {"standard_question": "Returns", "answers": ["30 days"]}]'
    )
    view = import_uploaded_json(deps, faq_kb, text)
    progress = view["progress"]
    assert view["status"] == "partial", progress.get("error")
    assert (progress["added"], progress["failed"]) == (2, 2)
    assert set(entries_of(deps, faq_kb)) == {"Opening hours", "Returns"}
    failures = {f["row"]: f for f in progress["failures"]}
    assert failures[2]["category"] == "invalid" and failures[3]["category"] == "invalid"
    assert failures[2]["reason"] == "the entry cannot be read: an object names the key 'answers' twice"
    assert "'x' twice" in failures[3]["reason"]  # an object nested in the entry
    csv_link = task_view(deps, str(view["id"]))["progress"]["failed_rows_download"]
    assert b"'answers' twice" in download(deps, csv_link)


def test_a_repeat_in_the_files_own_object_still_refuses_the_file(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    text = '{"entries": [{"standard_question": "a", "answers": ["b"]}], "entries": []}'
    view = import_uploaded_json(deps, faq_kb, text)
    assert view["status"] == "failed"
    assert view["progress"]["error"] == (
        "the JSON file cannot be read: an object names the key 'entries' twice"
    )
    assert entries_of(deps, faq_kb) == {}


def test_strict_json_raises_by_default_and_marks_on_request() -> None:
    with pytest.raises(strict_json.DuplicateKey):
        strict_json.loads('[{"a": 1, "a": 2}]')
    marked = strict_json.loads('[{"a": 1, "a": 2}, {"b": 1}]', on_duplicate="mark")
    assert isinstance(marked[0], strict_json.RepeatedKeys) and marked[0] == {"a": 2}
    assert marked[0].repeated_key == "a" and type(marked[1]) is dict


def test_a_plan_stored_before_refusals_still_loads() -> None:
    from chalicelib.faq.validation import PlannedRow

    stored = {
        "row": 1,
        "action": "fail",
        "source": {"row": 1, "question": "", "answers": []},
        "reason": "the question is empty",
        "category": "invalid",
    }
    assert PlannedRow.from_json(stored).source.refused == ""


# ---------------------------------------------------------------- the failed rows' link


@dataclass
class Caller:
    client: Client
    tenant: Tenant
    key: str

    def call(self, method: str, path: str, body: object = None) -> dict[str, Any]:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else b""
        answer = self.client.http.request(method, f"{V1}{path}", headers=headers, body=data)
        assert answer.status_code < 300, (method, path, answer.status_code, answer.body)
        return dict(answer.json_body["data"]) if answer.body else {}

    def failed_rows_link(self, kb_id: str) -> str:
        result = self.call("GET", f"/knowledge-bases/{kb_id}/faq/import/last-result")
        url = str(result["failed_rows_download"])
        assert "/r/" in url and "X-Amz" not in url and "expires" not in url.lower()
        return "/r/" + url.rsplit("/r/", 1)[1]


def _redeem(client: Client, path: str) -> tuple[int, str]:
    answer = client.http.get(path)
    code = answer.json_body["error"]["code"] if answer.status_code >= 400 else ""
    return answer.status_code, str(code)


def _faq_with_failed_rows(deps: Services, owner: Caller) -> str:
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": "faq", "type": "faq"})["id"])
    owner.call("POST", f"/knowledge-bases/{kb_id}/faq/import", {"entries": [entry("ok"), entry("")]})
    drain(deps)
    return kb_id


UNKNOWN = (404, "grant_not_found")


def test_the_failed_rows_link_is_a_grant_that_ends_with_its_key_and_share(
    deps: Services, client: Client, model: CountingEmbedding
) -> None:
    tenant, key = create_tenant_with_key(deps, "owner")
    owner = Caller(client, tenant, key)
    kb_id = _faq_with_failed_rows(deps, owner)
    second_key, second = admin.issue_key(deps, tenant.id, IssueKeyRequest(name="ci"))
    by_second = replace(owner, key=second).failed_rows_link(kb_id)
    by_primary = owner.failed_rows_link(kb_id)
    recipient_tenant, recipient_key = create_tenant_with_key(deps, "recipient")
    recipient = Caller(client, recipient_tenant, recipient_key)
    owner.call("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": recipient_tenant.id})
    by_recipient = recipient.failed_rows_link(kb_id)
    answer = client.http.get(by_second)
    assert answer.status_code == 302
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    assert b"the question is empty" in inbox.get_presigned(answer.headers["Location"])

    admin.revoke_key(deps, tenant.id, second_key.id)
    owner.call("DELETE", f"/knowledge-bases/{kb_id}/shares/{recipient_tenant.id}")
    assert _redeem(client, by_second) == UNKNOWN
    assert _redeem(client, by_recipient) == UNKNOWN
    assert _redeem(client, by_primary)[0] == 302  # another key's link: untouched
    grant_seconds = deps.settings.download_url_seconds
    assert grant_seconds == 900


def test_a_task_and_a_result_stored_with_a_presigned_link_answer_a_fresh_grant(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """As an import finished before grants left them: a 7-day presigned URL in the task's progress and in
    the knowledge base's last result. Neither is shown again; a fresh grant is, while the CSV is stored."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import last_result, start_import

    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("ok"), entry("")]))
    drain(deps)
    stored = deps.tasks.get(task.id)
    assert stored is not None
    csv_url = str(stored.params["failed_rows_url"])
    presigned = deps.inbox.presign_get(csv_url, 7 * 24 * 3600)
    stored.progress["failed_rows_download"] = presigned
    deps.tasks.save_progress(stored)
    last = deps.faq.get_last_import(faq_kb.id)
    assert last is not None
    deps.faq.put_last_import(faq_kb.id, {**last, "failed_rows_download": presigned})

    progress = task_view(deps, task.id)["progress"]
    result = last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)
    for link in (progress["failed_rows_download"], result["failed_rows_download"]):
        assert link != presigned and link.startswith(f"{BASE_URL}/r/")
        assert b"the question is empty" in download(deps, link)
    assert progress["failed_rows_expires_at"] and result["failed_rows_expires_at"]

    deps.inbox.delete(csv_url)  # the bucket's faq-imports/ rule expired it: no link, not a dead one
    assert "failed_rows_download" not in task_view(deps, task.id)["progress"]
    assert "failed_rows_download" not in last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)


def test_the_task_route_answers_a_failed_rows_link_minted_for_the_caller(
    deps: Services, client: Client, model: CountingEmbedding
) -> None:
    tenant, key = create_tenant_with_key(deps, "owner")
    owner = Caller(client, tenant, key)
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": "faq", "type": "faq"})["id"])
    started = owner.call(
        "POST", f"/knowledge-bases/{kb_id}/faq/import", {"entries": [entry("ok"), entry("")]}
    )
    drain(deps)

    task = owner.call("GET", f"/tasks/{started['task_id']}")

    url = str(task["progress"]["failed_rows_download"])
    assert "/r/" in url and "X-Amz" not in url
    assert _redeem(client, "/r/" + url.rsplit("/r/", 1)[1])[0] == 302
