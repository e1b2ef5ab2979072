"""Moves a space's entries from the "space" index scope to the "tenant" one (`opensearch_names`): each tenant's
entries of the space's index are copied into that tenant's index of the space, from `_source` (nothing is
re-embedded, the vectors are copied). The model is `opensearch_rebuild`; a move of the space `name`:

1. finds the index serving `name` (as the rebuild does) and the knowledge bases with entries in it (a
   `composite` aggregation on `kb_id`), and each one's tenant (`owners`: the state's knowledge bases); the
   entries of a knowledge base that is gone are not copied (no tenant names their index) and are counted;
2. blocks writes on the serving index (`index.blocks.write`) and refreshes it;
3. per tenant: drops the tenant's index when a crashed move made it (its `_meta` `COPY_META_KEY` names this
   serving index), unless a reindex task still writes into it; refuses when the tenant's index was made
   otherwise (the deployment wrote it: its scope may be "tenant" already); creates `versioned_name(index)`
   behind the alias `index` (what `ensure_index` creates) with `index_body` at the serving index's dimension,
   kNN engine, HNSW parameters, shards and replicas; copies the tenant's knowledge bases' entries (`_reindex`
   with a `terms` query on `kb_id`, as a task polled to its end, as the rebuild does) and compares the
   counts: on a difference it deletes that copy and refuses;
4. once every tenant's copy is verified, marks the serving index moved (`_meta` `MOVED_META_KEY`) and leaves
   its write block on: every write to the space's index is refused as busy (the port's IndexUnavailable: the
   stages retry, the API answers 503 `index_unavailable`) until the stack's `OpenSearchIndexScope` is
   "tenant", so nothing written after the copy is lost; searches read the space's index until then.

A re-run of a moved index does nothing; with `drop_old` (after the switch) it deletes the old index. Before
the mark, a re-run after a crash at any step converges: the space's index is the truth (the stack's scope is
still "space", no tenant index is read) and every copy is made again in a fresh index, so nothing is doubled.
The write block is lifted whenever the move refuses or fails before the mark (one a killed run left on: by a
re-run's refusal, or `reopen`). `reopen` undoes a move that is
not wanted after all (the scope stays "space"): it lifts the block and the mark; the copies are dropped by the
next move. Entries are matched by `_id` (the entry's id: Serverless, whose engine assigns ids, has no
`_reindex` and no move).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError

from chalicelib.adapters.index.opensearch import versioned_name
from chalicelib.adapters.index.opensearch_names import index_name, is_tenant_index
from chalicelib.adapters.index.opensearch_rebuild import (
    POLL_SECONDS,
    REINDEX_TIMEOUT,
    RebuildPlan,
    RebuildRefused,
    ReindexStillRunning,
    index_names,
    plan_rebuild,
    reindex_failed,
    run_reindex,
    running_copies,
    set_write_block,
    target_body,
)
from chalicelib.ports import IndexSpace

#: on a space's index whose entries are all in their tenants' indexes (the move verified them)
MOVED_META_KEY = "weknora_moved_to_tenant_indexes"
#: on a tenant index a move made: the space's index it is a copy of (until the mark, a scratch copy)
COPY_META_KEY = "weknora_scope_copy_of"
#: knowledge base ids per aggregation page, `owners` call and `terms` query
KB_BATCH = 1000

#: the tenants of those knowledge bases still there (a gone one is left out), by knowledge base id
Owners = Callable[[Sequence[str]], Mapping[str, str]]


class MoveRefused(RuntimeError):
    """Nothing was marked moved: the space's index serves on as it was, writable. The message says why."""


@dataclass(frozen=True)
class TenantCopy:
    tenant_id: str
    index: str  #: the tenant's index of the space (the alias the adapter addresses)
    kb_ids: tuple[str, ...]
    documents: int  #: the tenant's entries in the space's index


@dataclass(frozen=True)
class MovePlan:
    name: str  #: the space's index (its alias)
    serving: str  #: the concrete index behind it
    moved: bool  #: marked moved by an earlier run: nothing to copy
    tenants: tuple[TenantCopy, ...]
    orphans: int  #: entries of knowledge bases that are gone: not copied

    def describe(self) -> str:
        if self.moved:
            return f"{self.name}: moved to its tenants' indexes ({self.serving} is write-blocked, kept)"
        copies = ", ".join(f"{t.documents} into {t.index}" for t in self.tenants) or "nothing"
        gone = (
            f"; {self.orphans} entries of knowledge bases that are gone stay behind" if self.orphans else ""
        )
        return f"{self.name}: copy {copies} from {self.serving}{gone}"


@dataclass(frozen=True)
class MoveResult:
    plan: MovePlan
    moved: bool  #: copied and marked by this run
    dropped: bool  #: the old index deleted by this run


def _space_of(name: str, dimension: int) -> IndexSpace:
    """The space whose name is `name` (`index_name` takes a space); a name no space has is refused."""
    prefix, suffix = "weknora-", f"-{dimension}"
    space = IndexSpace(model_id=name.removeprefix(prefix).removesuffix(suffix), dimensions=dimension)
    if space.name != name:
        raise MoveRefused(f"{name}: not the index of a space (weknora-<model>-{dimension})")
    return space


def _meta(client: OpenSearch, concrete: str) -> dict[str, Any]:
    found: dict[str, Any] = client.indices.get_mapping(index=concrete)[concrete]["mappings"].get("_meta", {})
    return found


def _kb_counts(client: OpenSearch, index: str) -> dict[str, int]:
    """Each knowledge base with entries in `index` -> how many (a `composite` aggregation, paged)."""
    counts: dict[str, int] = {}
    after: dict[str, Any] | None = None
    while True:
        composite: dict[str, Any] = {"size": KB_BATCH, "sources": [{"kb": {"terms": {"field": "kb_id"}}}]}
        if after is not None:
            composite["after"] = after
        body = {"size": 0, "aggs": {"kbs": {"composite": composite}}}
        found = client.search(index=index, body=body)["aggregations"]["kbs"]
        for bucket in found["buckets"]:
            counts[str(bucket["key"]["kb"])] = int(bucket["doc_count"])
        after = found.get("after_key")
        if not found["buckets"] or after is None:
            return counts


def _serving(client: OpenSearch, name: str) -> RebuildPlan:
    try:
        return plan_rebuild(client, name)
    except RebuildRefused as refused:  # its reasons (no such index, not the adapter's) hold here alike
        raise MoveRefused(str(refused)) from None


def plan_move(client: OpenSearch, name: str, owners: Owners) -> MovePlan:
    """What a move of the space `name` would copy where (from the index as it is now)."""
    serving = _serving(client, name)
    space = _space_of(name, serving.dimension)
    if _meta(client, serving.serving).get(MOVED_META_KEY):
        return MovePlan(name, serving.serving, moved=True, tenants=(), orphans=0)
    counts = _kb_counts(client, serving.serving)
    kb_ids = sorted(counts)
    tenant_of: dict[str, str] = {}
    for start in range(0, len(kb_ids), KB_BATCH):
        tenant_of.update(owners(kb_ids[start : start + KB_BATCH]))
    by_tenant: dict[str, list[str]] = {}
    for kb_id in kb_ids:
        if kb_id in tenant_of:
            by_tenant.setdefault(tenant_of[kb_id], []).append(kb_id)
    tenants = tuple(
        TenantCopy(tenant, index_name(space, tenant), tuple(kbs), sum(counts[kb] for kb in kbs))
        for tenant, kbs in sorted(by_tenant.items())
    )
    orphans = sum(n for kb_id, n in counts.items() if kb_id not in tenant_of)
    return MovePlan(name, serving.serving, moved=False, tenants=tenants, orphans=orphans)


def _kb_query(kb_ids: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"terms": {"kb_id": list(kb_ids)}}]}}


def _count(client: OpenSearch, index: str, kb_ids: Sequence[str] | None = None) -> int:
    if kb_ids is None:
        return int(client.count(index=index)["count"])
    return sum(
        int(client.count(index=index, body={"query": _kb_query(kb_ids[i : i + KB_BATCH])})["count"])
        for i in range(0, len(kb_ids), KB_BATCH)
    )


def _clear_scratch(client: OpenSearch, copy: TenantCopy, serving: str) -> None:
    """Drops the tenant's index when an unfinished move of `serving` made it; refuses for any other."""
    try:
        found = client.indices.get_alias(index=copy.index)
    except NotFoundError:
        found = {}
    if not found:  # the concrete name alone (a rebuild's leftover, its alias gone): dropped if a move made it
        with contextlib.suppress(NotFoundError):
            found = client.indices.get_alias(index=versioned_name(copy.index))
    for concrete in found:
        if _meta(client, concrete).get(COPY_META_KEY) != serving:
            raise MoveRefused(
                f"{copy.index} exists and is no copy of {serving} by a move: not touched (is the stack's "
                "OpenSearchIndexScope `tenant` already?)"
            )
        if running := running_copies(client, concrete):
            raise MoveRefused(
                f"a copy into {concrete} is still running: task {', '.join(running)}; re-run later"
            )
        client.indices.delete(index=concrete)


def _reindex(
    client: OpenSearch, body: Mapping[str, Any], target: str, *, timeout: float, poll: float
) -> bool:
    """Runs one `_reindex` as a task to its end (as the rebuild does); False when it failed."""
    try:
        result = run_reindex(
            client,
            body,
            timeout=timeout,
            poll=poll,
            still_running=lambda task: (
                f"the copy into {target} still runs as task {task} after {timeout:g}s; re-run once it is "
                f"done (GET _tasks/{task}), or cancel it (POST _tasks/{task}/_cancel)"
            ),
        )
    except ReindexStillRunning as running:
        raise MoveRefused(str(running)) from None
    return not reindex_failed(result)


def _copy_tenant(
    client: OpenSearch, plan: RebuildPlan, copy: TenantCopy, *, timeout: float, poll: float
) -> None:
    _clear_scratch(client, copy, plan.serving)
    concrete = versioned_name(copy.index)
    body = target_body(client, plan)
    body["mappings"]["_meta"][COPY_META_KEY] = plan.serving
    body["aliases"] = {copy.index: {}}
    client.indices.create(index=concrete, body=body)
    ok = True
    for start in range(0, len(copy.kb_ids), KB_BATCH):
        query = _kb_query(copy.kb_ids[start : start + KB_BATCH])
        reindex = {"source": {"index": plan.serving, "query": query}, "dest": {"index": concrete}}
        ok = _reindex(client, reindex, concrete, timeout=timeout, poll=poll) and ok
    client.indices.refresh(index=concrete)
    before, after = _count(client, plan.serving, copy.kb_ids), _count(client, concrete)
    if not ok or before != after:
        client.indices.delete(index=concrete)
        raise MoveRefused(
            f"{copy.index}: the copy holds {after} entries, {plan.serving} {before} of tenant {copy.tenant_id}"
            f"{' (the copy failed)' if not ok else ''}; the copy is deleted, the space's index serves on"
        )


def _mark(client: OpenSearch, concrete: str, moved: bool) -> None:
    # the whole `_meta` is sent, the mark as a value: a server that merges `_meta` and one that replaces it agree
    client.indices.put_mapping(
        index=concrete, body={"_meta": {**_meta(client, concrete), MOVED_META_KEY: moved}}
    )


@contextlib.contextmanager
def _blocked_until_marked(client: OpenSearch, concrete: str) -> Iterator[list[bool]]:
    """Blocks writes on `concrete`; lifts the block again unless the move is marked done (a mark whose answer
    was lost too: a moved index never takes a write the copies miss)."""
    done = [False]
    try:
        set_write_block(client, concrete, True)  # inside: a block applied whose answer was lost is lifted too
        yield done
    finally:
        if not done[0] and not _meta(client, concrete).get(MOVED_META_KEY):
            set_write_block(client, concrete, False)


def move_to_tenant_scope(
    client: OpenSearch,
    name: str,
    owners: Owners,
    *,
    dry_run: bool = False,
    drop_old: bool = False,
    timeout: float = REINDEX_TIMEOUT,
    poll: float = POLL_SECONDS,
) -> MoveResult:
    """Moves the space `name` (the steps in the module's docstring). `drop_old`: deletes its index once an
    earlier run moved it (after the stack's scope is "tenant"). Raises MoveRefused with the space's index
    serving, writable and unmarked when it cannot."""
    serving = _serving(client, name)
    if _meta(client, serving.serving).get(MOVED_META_KEY):
        plan = plan_move(client, name, owners)
        if drop_old and not dry_run:
            client.indices.delete(index=serving.serving)  # its alias goes with it
        return MoveResult(plan, moved=False, dropped=drop_old and not dry_run)
    if drop_old:
        raise MoveRefused(
            f"{name}: not moved yet; move it, set OpenSearchIndexScope to `tenant`, then drop the old index"
        )
    if dry_run:
        return MoveResult(plan_move(client, name, owners), moved=False, dropped=False)
    with _blocked_until_marked(client, serving.serving) as done:
        client.indices.refresh(index=serving.serving)  # the copies read what was written before the block
        plan = plan_move(client, name, owners)  # the knowledge bases as they are now, none added meanwhile
        for copy in plan.tenants:
            _copy_tenant(client, serving, copy, timeout=timeout, poll=poll)
        _mark(client, serving.serving, True)
        done[0] = True
    return MoveResult(plan, moved=True, dropped=False)


def reopen(client: OpenSearch, name: str) -> None:
    """Undoes a move whose scope switch is not wanted (the stack stays "space"): lifts the mark and the
    write block. The tenant copies stay, unread; the next move drops and makes them again."""
    serving = _serving(client, name).serving
    _mark(client, serving, False)
    set_write_block(client, serving, False)


def space_names(client: OpenSearch) -> list[str]:
    """The spaces' indexes on this cluster (what a move starts from): the adapter's names but tenant indexes."""
    return [name for name in index_names(client) if not is_tenant_index(name)]
