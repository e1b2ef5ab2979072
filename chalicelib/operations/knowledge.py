"""Reading knowledge: one row, a knowledge base's rows, the stage tree of an attempt."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies, UsageEntry
from chalicelib.services.ownership import knowledge_visible, missing_knowledge_error, owned_knowledge


def get_knowledge(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    knowledge = deps.knowledge.get(knowledge_id)
    if knowledge is None or not knowledge_visible(deps, tenant_id, knowledge):
        raise missing_knowledge_error(deps, tenant_id, knowledge_id)
    return knowledge


def spans(deps: Dependencies, tenant_id: str, knowledge_id: str, attempt: int | None) -> dict[str, Any]:
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if attempt is not None and attempt > knowledge.attempt:
        raise BadRequest(f"attempt must be from 1 to {knowledge.attempt}", code="invalid_query")
    wanted = attempt or knowledge.attempt
    view = deps.tracker.view(knowledge, wanted)
    usage = usage_by_span(deps.usage.for_knowledge(knowledge.id), wanted)
    for node in view["trace"]:
        node["usage"] = usage.get(node["span_id"], {})
    return view


#: the stage tree shows the enrichment subtasks' and the execution's usage under the postprocess stage
SPAN_OF_USAGE = {"enrichment": "postprocess", "workflow": "postprocess"}


def usage_by_span(entries: Iterable[UsageEntry], attempt: int) -> dict[str, dict[str, float]]:
    """The metered counts of one attempt, summed by stage-tree span."""
    spans: dict[str, Counter[str]] = defaultdict(Counter)
    for entry in entries:
        if entry.attempt == attempt:
            spans[SPAN_OF_USAGE.get(entry.stage, entry.stage)].update(entry.counts)
    return {span: {k: round(v, 6) for k, v in counts.items()} for span, counts in spans.items()}
