"""An index that refuses a search (its credentials, a broken mapping: a 403 or a 500 that is no "busy") is a
503 with a stable code, `index_refused`, on every API route; it had been a 500 `internal_error`."""

from __future__ import annotations

import json
from unittest.mock import patch

from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports.index import IndexRefused


def test_a_search_the_index_refuses_is_a_503_with_a_stable_code(deps: Services, client: Client) -> None:
    tenant, key = create_tenant_with_key(deps, "acme")
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    own = create_kb(deps, tenant.id, CreateKnowledgeBase(name="handbook"))
    engine = deps.engine(own.retrieval_engine)
    with patch.object(type(engine), "hybrid_search", side_effect=IndexRefused(403, "security_exception")):
        answer = client.http.post(
            f"/api/v1/knowledge-bases/{own.id}/hybrid-search",
            headers={"X-API-Key": key, "Content-Type": "application/json"},
            body=json.dumps({"query_text": "copper bell"}).encode(),
        )
    assert answer.status_code == 503, answer.body
    assert answer.json_body["error"]["code"] == "index_refused"
