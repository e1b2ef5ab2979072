"""What the FAQ service tests share: an embedding model that counts what it embeds, and FAQ knowledge bases.
The fixtures `model` and `faq_kb` that use them are in this folder's conftest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.ports import ModelUnavailable


class CountingEmbedding(HashingEmbedding):
    """HashingEmbedding that counts the texts it embeds and can be told to fail."""

    def __init__(self) -> None:
        super().__init__(64)
        self.texts: list[str] = []
        self.fail_after: int | None = None  # texts; then ModelUnavailable until reset
        self.errors: list[Exception] = []  # raised one per call first

    def embed(self, texts: Sequence[str]) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        if self.fail_after is not None and len(self.texts) + len(texts) > self.fail_after:
            raise ModelUnavailable("scripted outage")
        self.texts.extend(texts)
        return super().embed(texts)


def faq_kb_named(deps: Services, tenant: Tenant, name: str) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name, type="faq"))
