"""Knowledge bases in DynamoDB."""

from __future__ import annotations

from collections.abc import Mapping
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

    def list(self, tenant_id: str) -> list[KnowledgeBase]:
        return [kb_from_body(item.body) for item in self.model.tenant_index.query(tenant_id)]

    def delete(self, kb_id: str) -> None:
        self.model(kb_id).delete()


# ---------------------------------------------------------------- knowledge
