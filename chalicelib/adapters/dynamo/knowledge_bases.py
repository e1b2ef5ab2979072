"""Knowledge bases in DynamoDB."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
    PutError,
)

from chalicelib.adapters.dynamo.tables import Models
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.types import (
    ChunkingConfig,
    EnrichmentSettings,
    FaqIndexSettings,
    IndexingStrategy,
    KnowledgeBase,
    utcnow,
)


def kb_to_body(kb: KnowledgeBase) -> dict[str, Any]:
    body = asdict(kb)
    body["created_at"] = to_iso(kb.created_at)
    body["updated_at"] = to_iso(kb.updated_at)
    return body


def kb_from_body(body: Mapping[str, Any]) -> KnowledgeBase:
    data = dict(body)
    data["chunking_config"] = ChunkingConfig(**data.get("chunking_config") or {})
    data["indexing_strategy"] = IndexingStrategy(**data.get("indexing_strategy") or {})
    data["enrichment"] = EnrichmentSettings(**data.get("enrichment") or {})
    data["faq_index"] = FaqIndexSettings(**data.get("faq_index") or {})
    data["created_at"] = from_iso(data["created_at"])
    data["updated_at"] = from_iso(data["updated_at"])
    known = KnowledgeBase.__dataclass_fields__
    return KnowledgeBase(**{k: v for k, v in data.items() if k in known})


class DynamoKnowledgeBaseRepo:
    def __init__(self, models: Models):
        self.model = models.kb

    def get(self, kb_id: str, *, consistent: bool = False) -> KnowledgeBase | None:
        try:
            return kb_from_body(self.model.get(kb_id, consistent_read=consistent).body)
        except DoesNotExist:
            return None

    def put(self, kb: KnowledgeBase) -> None:
        self.model(
            kb.id, tenant_id=kb.tenant_id, name=kb.name, body=kb_to_body(kb), version=kb.version
        ).save()

    def update(self, kb: KnowledgeBase) -> KnowledgeBase | None:
        m = self.model
        bumped = replace(kb, version=kb.version + 1, updated_at=utcnow())
        expected = m.version == kb.version if kb.version else (m.version.does_not_exist() | (m.version == 0))
        try:
            m(
                kb.id, tenant_id=kb.tenant_id, name=kb.name, body=kb_to_body(bumped), version=bumped.version
            ).save(condition=m.id.exists() & expected)
        except PutError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return None
            raise
        return bumped

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None:
        for item in self.model.tenant_index.query(tenant_id, self.model.name == name, limit=1):
            return kb_from_body(item.body)
        return None

    def page(self, tenant_id: str, after: tuple[str, str] | None, limit: int) -> list[KnowledgeBase]:
        m = self.model
        condition = m.name >= after[0] if after is not None else None
        found: list[KnowledgeBase] = []
        # the index orders by name only: a name held twice (two racing creates) is read whole, then ordered
        for item in m.tenant_index.query(tenant_id, condition, page_size=limit + 1):
            kb = kb_from_body(item.body)
            if after is not None and (kb.name, kb.id) <= after:
                continue
            if len(found) >= limit and kb.name != found[limit - 1].name:
                break
            found.append(kb)
        return sorted(found, key=lambda kb: (kb.name, kb.id))[:limit]

    def count(self, tenant_id: str, up_to: int) -> int:
        # a query of ids that stops at `up_to` items (a Select=COUNT with a Limit goes on page by page)
        ids = self.model.tenant_index.query(tenant_id, limit=up_to, attributes_to_get=["id"])
        return sum(1 for _ in ids)

    def get_many(self, kb_ids: Sequence[str]) -> dict[str, KnowledgeBase]:
        if not kb_ids:
            return {}
        items = self.model.batch_get(list(dict.fromkeys(kb_ids)))
        return {kb.id: kb for kb in (kb_from_body(item.body) for item in items)}

    def delete(self, kb_id: str) -> None:
        self.model(kb_id).delete()


# ---------------------------------------------------------------- knowledge
