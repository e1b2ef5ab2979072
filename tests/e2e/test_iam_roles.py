"""Each function's role in the packaged template allows what the function does, and only a complete one
does: the calls of one document's life (upload, the stages and the workflow, search, delete) are recorded per
function, and taking out any statement they need makes the check that runs after every e2e test fail."""

from __future__ import annotations

from infra.iam_policy import RoleBook, statement_allows

from chalicelib.bootstrap import get_deps
from chalicelib.local.aws_calls import CallLog
from chalicelib.local.runtime import LocalRuntime
from chalicelib.settings import QUEUES

from .conftest import Api

DOC = b"# Tea\n\nSteep green tea at 80 degrees for two minutes.\n\n## Black tea\n\nBoiling water, four minutes.\n"


def test_removing_any_permission_a_document_needs_fails_the_check(
    api: Api, runtime: LocalRuntime, _aws_calls: CallLog, _roles: RoleBook
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "tea.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    hits = api.post(
        f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "green tea", "match_count": 3}
    )
    assert hits.status_code == 200 and hits.json_body["data"]
    deleted = api.client.http.delete(f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code in (200, 202), deleted.json_body
    runtime.drain(timeout=120)

    calls = _aws_calls.take()
    assert not _roles.denied(calls)
    # every queue's URL is given (the runtime sets them as the template does): no function looked one up
    assert not [c for c in calls if c.operation == "GetQueueUrl"]
    ran = {call.function for call in calls}
    assert {"APIHandler", "DocreaderStage", "ChunkingStage", "EmbeddingStage", "LifecycleTask"} <= ran

    needed = 0
    for function in sorted(ran):
        mine = [c for c in calls if c.function == function]
        requests = {r for c in mine for r in _roles.requests(c)}
        for index, document in enumerate(_roles.policies[function][0]["Statement"]):
            if not any(statement_allows(document, r) for r in requests):
                continue  # nothing this document did needs it (another path does)
            needed += 1
            assert _roles.without(function, index).denied(mine), (function, document)
    assert needed >= 20


def test_the_runtime_gives_the_app_every_queues_and_dead_letter_queues_url(runtime: LocalRuntime) -> None:
    """As the packaged template gives each function those of its queues (infra/stack.py); one process serves
    every function here, so it has them all."""
    settings = get_deps().settings
    by_name = {r.name: r.url for r in runtime.resources.queues}
    assert settings.queue_urls == {q: by_name[settings.queue(q)] for q in QUEUES}
    assert settings.dead_letter_queue_urls == {q: by_name[f"{settings.queue(q)}-dlq"] for q in QUEUES}
