"""Which OpenSearch index holds a knowledge base's entries: the index scope (`Settings.opensearch_index_scope`).

"space" (the default): one index per IndexSpace (`space.name`) for every tenant, a knowledge base a `term`
filter in it. "tenant": one index per space and tenant (`{space.name}-t-{hash of the tenant id}`, the
knowledge base's owner's, created on its first write; a shared knowledge base is searched in its owner's).
BM25 term statistics are per index: in a shared one, one tenant's documents change another's scores and
tell it which terms others use (a reviewer's proof); per tenant, they cannot, at the cost of one index (its
shards) per tenant and model. `index_name` is the one place a name is made; a clone or a move stays within
one tenant, so within one index. `kb_filters`: the filters that pick a knowledge base's entries in it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from chalicelib.ports import IndexSpace

#: between the space's name and the tenant's hash
TENANT_MARK = "-t-"
#: hex digits of the tenant id's sha256 in its index's name
TENANT_HASH_DIGITS = 16
_TENANT_INDEX = re.compile(rf".+{re.escape(TENANT_MARK)}[0-9a-f]{{{TENANT_HASH_DIGITS}}}")
#: in a space index's `_meta` once a scope move copied all its entries into its tenants' indexes
#: (`opensearch_scope_move`); the rebuild refuses such an index (its copy would be neither blocked nor marked)
MOVED_META_KEY = "weknora_moved_to_tenant_indexes"
#: knowledge bases whose tenant is remembered (a few bytes each); past it, the memory starts again
TENANTS_KEPT = 50_000


def index_name(space: IndexSpace, tenant_id: str | None) -> str:
    """The index (the alias, when aliased) an entry of `space` is in: the space's own with no tenant (scope
    "space"), else the tenant's index of the space. A short stable hash keeps the name lowercase and
    bounded whatever the tenant id."""
    if tenant_id is None:
        return space.name
    return f"{space.name}{TENANT_MARK}{hashlib.sha256(tenant_id.encode()).hexdigest()[:TENANT_HASH_DIGITS]}"


def is_tenant_index(name: str) -> bool:
    """`name` is one `index_name` gives a tenant (not a space's own)."""
    return _TENANT_INDEX.fullmatch(name) is not None


def tenant_indexes(space: IndexSpace) -> str:
    """The wildcard pattern of the space's tenant indexes."""
    return f"{space.name}{TENANT_MARK}*"


class IndexNames:
    """Names a knowledge base's index. `tenant_of` (the "tenant" scope): a knowledge base's tenant, None when
    it is gone; read once per knowledge base and process (a knowledge base never changes tenant). Without it
    every entry is in its space's one index."""

    def __init__(self, tenant_of: Callable[[str], str | None] | None = None) -> None:
        self.tenant_of = tenant_of
        self._tenants: dict[str, str] = {}
        self._lock = threading.Lock()

    def of(self, space: IndexSpace, kb_id: str) -> str | None:
        """The index of `kb_id`'s entries of `space`; None when the scope is per tenant and the knowledge base
        is gone and its tenant not remembered here: its index is unknown. The engine then refuses a write of
        it, and deletes, counts and reads look in every tenant index of the space (`tenant_indexes`). A
        process that remembers the tenant (a warm container) still writes a late entry of a gone knowledge
        base, as the "space" scope does: a clean-up by the knowledge base's id finds it either way."""
        if self.tenant_of is None:
            return index_name(space, None)
        with self._lock:
            tenant = self._tenants.get(kb_id)
        if tenant is None:
            tenant = self.tenant_of(kb_id)
            if tenant is None:
                return None
            with self._lock:
                if len(self._tenants) >= TENANTS_KEPT:
                    self._tenants.clear()
                self._tenants[kb_id] = tenant
        return index_name(space, tenant)


def kb_filters(
    kb_id: str, *, enabled_only: bool = False, knowledge_ids: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The filters that pick a knowledge base's entries (of some documents, the enabled ones) in its index."""
    filters: list[dict[str, Any]] = [{"term": {"kb_id": kb_id}}]
    if enabled_only:
        filters.append({"term": {"is_enabled": True}})
    if knowledge_ids is not None:  # a `terms` filter takes up to index.max_terms_count (65,536) values
        filters.append({"terms": {"knowledge_id": list(dict.fromkeys(knowledge_ids))}})
    return filters
