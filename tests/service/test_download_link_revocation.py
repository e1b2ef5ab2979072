"""A download link (`GET /r/{token}`) ends with the access that minted it: through the API on the in-memory
adapters, a share recipient's link is refused once the knowledge base is unshared (or the document moved out
of it), a link minted with a key is refused once that key is revoked, and the refusal is an unknown link's
(404 grant_not_found). The owner's own links are untouched by another tenant's share ending, and a grant
from before minters were recorded keeps working until it expires."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from chalice.test import Client

from chalicelib.adapters.memory import MemoryKnowledgeRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import IssueKeyRequest
from chalicelib.domain.resources import token_hash
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations import admin
from chalicelib.operations.tenants import create_tenant_with_key

from .conftest import MAIN_STAGES, TEXT, drain

V1 = "/api/v1"


@dataclass
class Caller:
    client: Client
    tenant: Tenant
    key: str

    def call(self, method: str, path: str, body: object = None) -> dict[str, object]:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else b""
        answer = self.client.http.request(method, f"{V1}{path}", headers=headers, body=data)
        assert answer.status_code < 300, (method, path, answer.status_code, answer.body)
        return dict(answer.json_body["data"]) if answer.body else {}

    def link(self, knowledge_id: str) -> str:
        url = str(self.call("GET", f"/knowledge/{knowledge_id}/file-url?kind=original")["url"])
        return "/r/" + url.rsplit("/r/", 1)[1]


def _caller(deps: Services, client: Client, name: str) -> Caller:
    tenant, key = create_tenant_with_key(deps, name)
    return Caller(client, tenant, key)


def _redeem(client: Client, path: str) -> tuple[int, str]:
    answer = client.http.get(path)
    code = answer.json_body["error"]["code"] if answer.status_code >= 400 else ""
    return answer.status_code, str(code)


def _document(owner: Caller, name: str = "kb") -> tuple[str, str]:
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": name})["id"])
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="notes.md"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + TEXT + b"\r\n--b--\r\n"
    )
    answer = owner.client.http.post(
        f"{V1}/knowledge-bases/{kb_id}/knowledge/file",
        headers={"X-API-Key": owner.key, "Content-Type": "multipart/form-data; boundary=b"},
        body=body,
    )
    assert answer.status_code < 300, answer.body
    return kb_id, str(answer.json_body["data"]["id"])


UNKNOWN = (404, "grant_not_found")


def test_a_recipients_link_ends_with_the_share_and_the_owners_does_not(
    deps: Services, client: Client
) -> None:
    owner, recipient, other = (_caller(deps, client, n) for n in ("owner", "recipient", "other"))
    kb_id, knowledge_id = _document(owner)
    owner.call("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": recipient.tenant.id})
    owner.call("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": other.tenant.id})
    owners, recipients, others = (
        owner.link(knowledge_id),
        recipient.link(knowledge_id),
        other.link(knowledge_id),
    )
    assert _redeem(client, recipients)[0] == 302 and _redeem(client, others)[0] == 302

    owner.call("DELETE", f"/knowledge-bases/{kb_id}/shares/{recipient.tenant.id}")
    assert _redeem(client, recipients) == UNKNOWN == _redeem(client, "/r/never-issued")
    assert _redeem(client, recipients) == UNKNOWN  # every time, not once
    assert _redeem(client, owners)[0] == 302  # the owner's own link and the other share's: unchanged
    assert _redeem(client, others)[0] == 302


def test_a_link_ends_with_the_key_that_minted_it(deps: Services, client: Client) -> None:
    owner, recipient = _caller(deps, client, "owner"), _caller(deps, client, "recipient")
    kb_id, knowledge_id = _document(owner)
    owner.call("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": recipient.tenant.id})
    second_key, second = admin.issue_key(deps, owner.tenant.id, IssueKeyRequest(name="ci"))
    by_second = replace(owner, key=second).link(knowledge_id)
    by_primary = owner.link(knowledge_id)
    reader_key, reader = admin.issue_key(deps, recipient.tenant.id, IssueKeyRequest(scope="read"))
    by_reader = replace(recipient, key=reader).link(knowledge_id)

    admin.revoke_key(deps, owner.tenant.id, second_key.id)
    admin.revoke_key(deps, recipient.tenant.id, reader_key.id)
    assert _redeem(client, by_second) == UNKNOWN
    assert _redeem(client, by_reader) == UNKNOWN
    assert _redeem(client, by_primary)[0] == 302  # another key of the same tenant: its links still work
    # a tenant's primary key without a record of its own (revoking it writes one) ends its links too
    primary_id = admin.key_view(admin.list_keys(deps, owner.tenant.id)[0])["id"]
    admin.revoke_key(deps, owner.tenant.id, str(primary_id))
    assert _redeem(client, by_primary) == UNKNOWN


def test_a_recipients_link_ends_when_the_document_moves_out_of_the_shared_kb(
    deps: Services, client: Client
) -> None:
    owner, recipient = _caller(deps, client, "owner"), _caller(deps, client, "recipient")
    shared_kb, knowledge_id = _document(owner, "shared")
    private_kb = str(owner.call("POST", "/knowledge-bases", {"name": "private"})["id"])
    owner.call("POST", f"/knowledge-bases/{shared_kb}/shares", {"tenant_id": recipient.tenant.id})
    limited_key, limited = admin.issue_key(
        deps, owner.tenant.id, IssueKeyRequest(kb_ids=[shared_kb], scope="read")
    )
    drain(deps, MAIN_STAGES)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(knowledge_id, parse_status=ParseStatus.COMPLETED)  # as the state machine leaves it
    recipients = recipient.link(knowledge_id)
    by_limited = replace(owner, key=limited).link(knowledge_id)
    owners = owner.link(knowledge_id)
    assert rows.move_to_kb(knowledge_id, shared_kb, private_kb, "") is not None
    assert _redeem(client, recipients) == UNKNOWN
    assert _redeem(client, by_limited) == UNKNOWN  # a key limited to the old KB no longer covers it
    assert _redeem(client, owners)[0] == 302
    assert limited_key.kb_ids == (shared_kb,)


def test_a_grant_without_a_minter_works_until_it_expires(deps: Services, client: Client) -> None:
    """Grants minted before minters were recorded (short-lived) keep today's behaviour."""
    owner, recipient = _caller(deps, client, "owner"), _caller(deps, client, "recipient")
    kb_id, knowledge_id = _document(owner)
    owner.call("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": recipient.tenant.id})
    path = recipient.link(knowledge_id)
    digest = token_hash(path.removeprefix("/r/"))
    grant = deps.resources.get_grant(digest)
    assert grant is not None and grant.minted_by is not None  # the request's tenant and key
    assert (grant.minted_by.tenant_id, grant.minted_by.key_hash) == (
        recipient.tenant.id,
        recipient.tenant.api_key_hash,
    )
    deps.resources.put_grant(replace(grant, minted_by=None))  # as stored before this change
    owner.call("DELETE", f"/knowledge-bases/{kb_id}/shares/{recipient.tenant.id}")
    assert _redeem(client, path)[0] == 302
    expired = replace(grant, minted_by=None, expires_at=datetime.now(UTC) - timedelta(seconds=1))
    deps.resources.put_grant(expired)
    assert _redeem(client, path) == (410, "grant_expired")
