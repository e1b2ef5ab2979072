"""Embedding cache in DynamoDB: one item per (tenant, model space, content hash), the float32 vector as bytes.

Items expire after 90 days (TTL) so the table does not grow without bound; a miss only costs a re-embed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pynamodb.attributes import BinaryAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from chalicelib.ports import IndexSpace
from chalicelib.settings import Settings

TTL_SECONDS = 90 * 24 * 3600
BATCH_GET = 100  # DynamoDB's BatchGetItem limit


def build_cache_model(settings: Settings) -> type[Any]:
    class EmbeddingCacheItem(Model):
        class Meta:
            table_name = settings.table("embedding-cache")
            region = settings.region

        cache_key = UnicodeAttribute(hash_key=True)
        vector = BinaryAttribute(legacy_encoding=False)
        expires_at = NumberAttribute()

    return EmbeddingCacheItem


class DynamoEmbeddingCache:
    def __init__(self, model: type[Any]):
        self.model = model

    @staticmethod
    def _key(tenant_id: str, space: IndexSpace, content_hash: str) -> str:
        # The tenant first: items written before it was in the key (`space|hash`) are never hit again and
        # expire by their TTL.
        return f"{tenant_id}|{space.name}|{content_hash}"

    def get_many(self, tenant_id: str, space: IndexSpace, content_hashes: Sequence[str]) -> dict[str, Any]:
        wanted = {self._key(tenant_id, space, h): h for h in content_hashes}
        keys = list(wanted)
        found: dict[str, Any] = {}
        for start in range(0, len(keys), BATCH_GET):
            for item in self.model.batch_get(keys[start : start + BATCH_GET]):
                vector = np.frombuffer(item.vector, dtype=np.float32)
                if vector.shape[0] == space.dimensions:
                    found[wanted[item.cache_key]] = vector
        return found

    def put_many(self, tenant_id: str, space: IndexSpace, vectors: Mapping[str, Any]) -> None:
        expires = int(time.time()) + TTL_SECONDS
        with self.model.batch_write() as batch:
            for content_hash, vector in vectors.items():
                data = np.asarray(vector, dtype=np.float32).tobytes()
                key = self._key(tenant_id, space, content_hash)
                batch.save(self.model(key, vector=data, expires_at=expires))
