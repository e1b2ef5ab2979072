"""Moves a space's entries from the "space" index scope to the "tenant" one (`opensearch_names`): each tenant's
entries of the space's index are copied into that tenant's index of the space, from `_source` (nothing is
re-embedded, the vectors are copied). The model is `opensearch_rebuild`; a move of the space `name`:

1. finds the index serving `name` (as the rebuild does); stamps its `_meta` with this run's token
   (`RUN_META_KEY`), refusing, without touching anything, when another run's token is there (a run under way,
   or one killed: `take_over` after checking none runs);
2. blocks new space indexes (index templates, `block_new_space_indexes`: a space index first made after the
   listing would take writes no copy reads; the operator's script moves it too, and lifts the templates once
   no index waits for the switch) and writes on the serving index (`index.blocks.write`), and refreshes it;
3. finds the knowledge bases with entries in it (a `composite` aggregation on `kb_id`) and each one's tenant
   (`owners`: the state's knowledge bases); the entries no tenant is found for (a knowledge base that is
   gone, an entry without `kb_id`) are not copied: the move refuses unless `orphans` is their number (the
   dry run says it), and always when it finds no tenant at all for an index that holds entries;
4. per tenant: drops the tenant's index when a crashed move made it (its `_meta` `COPY_META_KEY` names this
   serving index), unless a reindex task still writes into it; refuses when the tenant's index was made
   otherwise (the deployment wrote it: its scope may be "tenant" already); creates `versioned_name(index)`
   behind the alias `index` (what `ensure_index` creates) with `index_body` at the serving index's dimension,
   kNN engine, HNSW parameters, shards and replicas; copies the tenant's knowledge bases' entries (`_reindex`
   with a `terms` query on `kb_id`, as a task polled to its end, as the rebuild does) and compares the
   counts: on a difference it deletes that copy and refuses;
5. once every tenant's copy is verified, and the block and its token are still on (no other run took over or
   lifted it meanwhile), marks the serving index moved (`_meta` `MOVED_META_KEY`, the token cleared) and
   leaves its write block on: every write to the space's index is refused as busy (the port's
   IndexUnavailable: the stages retry, the API answers 503 `index_unavailable`) until the stack's
   `OpenSearchIndexScope` is "tenant", so nothing written after the copy is lost; searches read the space's
   index until then.

A re-run of a moved index does nothing; with `drop_old` (after the switch) it deletes the old index. Before
the mark, a re-run after a crash at any step converges: the space's index is the truth (the stack's scope is
still "space", no tenant index is read) and every copy is made again in a fresh index, so nothing is doubled.
A run that refuses or fails before the mark lifts the write block and its token, and only its own: a block
another run holds is never lifted. `reopen` undoes a move that is not wanted after all (the scope stays
"space", before the deploy): it lifts the block and the mark, and refuses once a tenant index differs from the
space's index (the stack wrote there: it is in the "tenant" scope); the copies are dropped by the next move.
Entries are matched by `_id` (the entry's id: Serverless, whose engine assigns ids, has no `_reindex` and no
move).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError

from chalicelib.adapters.index.opensearch import TERMS_BATCH, versioned_name
from chalicelib.adapters.index.opensearch_names import (
    MOVED_META_KEY,
    TENANT_MARK,
    index_name,
    is_tenant_index,
)
from chalicelib.adapters.index.opensearch_rebuild import (
    POLL_SECONDS,
    REINDEX_TIMEOUT,
    RebuildPlan,
    RebuildRefused,
    ReindexStillRunning,
    index_meta,
    index_names,
    reindex_failed,
    run_reindex,
    running_copies,
    serving_plan,
    set_write_block,
    target_body,
)
from chalicelib.ports import IndexSpace

#: on a tenant index a move made: the space's index it is a copy of (until the mark, a scratch copy)
COPY_META_KEY = "weknora_scope_copy_of"
#: on a space index a move runs on: that run's token (its write block is that run's to lift)
RUN_META_KEY = "weknora_scope_move_run"
#: knowledge base ids per aggregation page, `owners` call and `terms` query (the adapter's `terms` batch)
KB_BATCH = TERMS_BATCH
#: the index templates that block a space index made while a move is under way (a tenant index is not)
SPACE_TEMPLATE = "weknora-scope-move-block-space-indexes"
TENANT_TEMPLATE = "weknora-scope-move-tenant-indexes-writable"
#: priorities no other template of the cluster is expected to share (equal priorities on overlapping
#: patterns are refused); the tenant one wins over the space one
TEMPLATE_PRIORITY = 7301

#: the tenants of those knowledge bases still there (a gone one is left out), by knowledge base id
Owners = Callable[[Sequence[str]], Mapping[str, str]]


class MoveRefused(RuntimeError):
    """Nothing was marked moved: the space's index serves on as it was, writable (unless another run holds
    it). The message says why."""


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
    orphans: int  #: entries of no tenant found (a gone knowledge base, no `kb_id`): not copied

    def describe(self) -> str:
        if self.moved:
            return f"{self.name}: moved to its tenants' indexes ({self.serving} is write-blocked, kept)"
        copies = ", ".join(f"{t.documents} into {t.index}" for t in self.tenants) or "nothing"
        gone = (
            f"; {self.orphans} entries of no knowledge base still there (deleted, or no kb_id) stay behind "
            f"(--orphans {self.orphans} to move all the same)"
            if self.orphans
            else ""
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
        return serving_plan(client, name)
    except RebuildRefused as refused:  # its reasons (no such index, not the adapter's) hold here alike
        raise MoveRefused(str(refused)) from None


def _by_tenant(
    client: OpenSearch, serving: str, owners: Owners
) -> tuple[dict[str, int], dict[str, list[str]]]:
    """The entries per knowledge base in `serving`, and the knowledge bases per tenant found for them."""
    counts = _kb_counts(client, serving)
    kb_ids = sorted(counts)
    tenant_of: dict[str, str] = {}
    for start in range(0, len(kb_ids), KB_BATCH):
        tenant_of.update(owners(kb_ids[start : start + KB_BATCH]))
    by_tenant: dict[str, list[str]] = {}
    for kb_id in kb_ids:
        if kb_id in tenant_of:
            by_tenant.setdefault(tenant_of[kb_id], []).append(kb_id)
    return counts, by_tenant


def plan_move(client: OpenSearch, name: str, owners: Owners) -> MovePlan:
    """What a move of the space `name` would copy where (from the index as it is now)."""
    serving = _serving(client, name)
    space = _space_of(name, serving.dimension)
    if serving.moved:
        return MovePlan(name, serving.serving, moved=True, tenants=(), orphans=0)
    counts, by_tenant = _by_tenant(client, serving.serving, owners)
    tenants = tuple(
        TenantCopy(tenant, index_name(space, tenant), tuple(kbs), sum(counts[kb] for kb in kbs))
        for tenant, kbs in sorted(by_tenant.items())
    )
    # what no copy takes: the total counts the entries without `kb_id` too, which no aggregation bucket holds
    orphans = _count(client, serving.serving) - sum(t.documents for t in tenants)
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


def _copies_of(client: OpenSearch, copy: TenantCopy) -> dict[str, Any]:
    """The concrete indexes of the tenant's index: behind its alias, or its concrete name alone (a rebuild's
    leftover, its alias gone)."""
    try:
        found: dict[str, Any] = client.indices.get_alias(index=copy.index)
    except NotFoundError:
        found = {}
    if not found:
        with contextlib.suppress(NotFoundError):
            found = client.indices.get_alias(index=versioned_name(copy.index))
    return found


def _clear_scratch(client: OpenSearch, copy: TenantCopy, serving: str, token: str) -> None:
    """Drops the tenant's index when an unfinished move of `serving` made it; refuses for any other, and when
    this run no longer holds `serving` (another run took over: the copies are its own now)."""
    for concrete in _copies_of(client, copy):
        if index_meta(client, concrete).get(COPY_META_KEY) != serving:
            raise MoveRefused(
                f"{copy.index} exists and is no copy of {serving} by a move: not touched (is the stack's "
                "OpenSearchIndexScope `tenant` already?)"
            )
        if running := running_copies(client, concrete):
            raise MoveRefused(
                f"a copy into {concrete} is still running: task {', '.join(running)}; re-run later"
            )
        _check_held(client, serving, token)
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
    client: OpenSearch, plan: RebuildPlan, copy: TenantCopy, token: str, *, timeout: float, poll: float
) -> None:
    _clear_scratch(client, copy, plan.serving, token)
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


def _put_meta(client: OpenSearch, concrete: str, changes: Mapping[str, Any]) -> None:
    # the whole `_meta` is sent, a key dropped as null: a server that merges `_meta` and one that replaces it
    # agree
    client.indices.put_mapping(index=concrete, body={"_meta": {**index_meta(client, concrete), **changes}})


def _mark(client: OpenSearch, concrete: str, moved: bool) -> None:
    _put_meta(client, concrete, {MOVED_META_KEY: moved, RUN_META_KEY: None})


def _write_blocked(client: OpenSearch, concrete: str) -> bool:
    settings = client.indices.get_settings(index=concrete)[concrete]["settings"]["index"]
    return str(settings.get("blocks", {}).get("write", "false")).lower() == "true"


def _acquire(client: OpenSearch, name: str, concrete: str, token: str, *, take_over: bool) -> None:
    """Stamps `concrete` with this run's token; refuses, changing nothing, when another run's is there."""
    other = index_meta(client, concrete).get(RUN_META_KEY)
    if other and not take_over:
        raise MoveRefused(
            f"{name}: another move (run {other}) is under way on {concrete}, or was killed: not touched; once "
            "no move runs (no `_reindex` task in GET _tasks?actions=*reindex), re-run with --take-over"
        )
    _put_meta(client, concrete, {RUN_META_KEY: token})
    _check_held(client, concrete, token)  # two runs stamping at once: the later stamp holds it


def _check_held(client: OpenSearch, concrete: str, token: str) -> None:
    if index_meta(client, concrete).get(RUN_META_KEY) != token:
        raise MoveRefused(f"another move run took {concrete} over: this run stops, nothing marked")


def _release(client: OpenSearch, concrete: str, token: str) -> None:
    """Lifts the write block and the token, if this run still holds `concrete` and did not mark it (a mark
    whose answer was lost too: a moved index never takes a write the copies miss)."""
    meta = index_meta(client, concrete)
    if meta.get(MOVED_META_KEY) or meta.get(RUN_META_KEY) != token:
        return
    set_write_block(client, concrete, False)
    _put_meta(client, concrete, {RUN_META_KEY: None})


def _template(pattern: str, priority: int, settings: Mapping[str, Any]) -> dict[str, Any]:
    return {"index_patterns": [pattern], "priority": priority, "template": {"settings": dict(settings)}}


def block_new_space_indexes(client: OpenSearch) -> None:
    """A space index created from now on (a model's first entry) is write-blocked, as the moved ones are: its
    writes wait for the switch instead of landing where no copy reads. A tenant index is not blocked."""
    # a model id holding TENANT_MARK escapes the block: the script's listing again after its pass moves it
    prefix = "weknora-*"
    client.indices.put_index_template(
        name=SPACE_TEMPLATE, body=_template(prefix, TEMPLATE_PRIORITY, {"index": {"blocks": {"write": True}}})
    )
    client.indices.put_index_template(
        name=TENANT_TEMPLATE, body=_template(f"{prefix}{TENANT_MARK}*", TEMPLATE_PRIORITY + 1, {})
    )


def lift_new_space_index_block(client: OpenSearch) -> None:
    """Undoes `block_new_space_indexes` (after the switch, or a move called off)."""
    for template in (SPACE_TEMPLATE, TENANT_TEMPLATE):
        with contextlib.suppress(NotFoundError):
            client.indices.delete_index_template(name=template)


def move_to_tenant_scope(
    client: OpenSearch,
    name: str,
    owners: Owners,
    *,
    dry_run: bool = False,
    drop_old: bool = False,
    orphans: int = 0,
    take_over: bool = False,
    timeout: float = REINDEX_TIMEOUT,
    poll: float = POLL_SECONDS,
) -> MoveResult:
    """Moves the space `name` (the steps in the module's docstring). `drop_old`: deletes its index once an
    earlier run moved it (after the stack's scope is "tenant"). `orphans`: how many entries of no tenant the
    operator accepts to leave behind (the plan's count, or it refuses). `take_over`: the run a token names is
    known dead. Raises MoveRefused with the space's index serving, writable and unmarked when it cannot."""
    serving = _serving(client, name)
    if serving.moved:
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
    token = uuid.uuid4().hex
    _acquire(client, name, serving.serving, token, take_over=take_over)  # a refusal here touches nothing
    marked = False
    try:
        block_new_space_indexes(client)
        # inside the try: a block applied whose answer was lost is lifted too
        set_write_block(client, serving.serving, True)
        client.indices.refresh(index=serving.serving)  # the copies read what was written before the block
        plan = plan_move(client, name, owners)  # the knowledge bases as they are now, none added meanwhile
        if plan.orphans and not plan.tenants:
            raise MoveRefused(
                f"{name}: no tenant found for any of its {plan.orphans} entries (the stack's tables?): not moved"
            )
        if plan.orphans != orphans:
            raise MoveRefused(
                f"{name}: {plan.orphans} entries of no knowledge base still there would stay behind (expected "
                f"{orphans}); check the tables, then re-run with --orphans {plan.orphans}"
            )
        for copy in plan.tenants:
            _copy_tenant(client, serving, copy, token, timeout=timeout, poll=poll)
        _check_held(client, serving.serving, token)
        if not _write_blocked(client, serving.serving):
            raise MoveRefused(
                f"{name}: the write block on {serving.serving} was lifted during the copy (writes may be missing "
                "from the copies): nothing marked; re-run"
            )
        _mark(client, serving.serving, True)
        marked = True
    finally:
        if not marked:
            _release(client, serving.serving, token)
    return MoveResult(plan, moved=True, dropped=False)


def reopen(client: OpenSearch, name: str, owners: Owners) -> None:
    """Undoes a move whose scope switch is not wanted (the stack stays "space", before the deploy): lifts the
    mark and the write block. Refuses once a tenant's copy differs from the space's index, knowledge base by
    knowledge base (a "tenant" stack wrote there: a next move would drop those writes). The tenant copies
    stay, unread; the next move drops and makes them again."""
    serving = _serving(client, name)
    space = _space_of(name, serving.dimension)
    counts, by_tenant = _by_tenant(client, serving.serving, owners)
    for tenant, kbs in sorted(by_tenant.items()):
        copy = TenantCopy(tenant, index_name(space, tenant), tuple(kbs), 0)
        for concrete in _copies_of(client, copy):
            copied = _kb_counts(client, concrete)
            if any(copied.get(kb, 0) != counts.get(kb, 0) for kb in {*kbs, *copied}):
                raise MoveRefused(
                    f"{name}: {copy.index} holds other entries than {serving.serving} (written in the `tenant` "
                    "scope after the switch?): not reopened; the tenant indexes are the truth now"
                )
    _mark(client, serving.serving, False)
    set_write_block(client, serving.serving, False)


def space_names(client: OpenSearch) -> list[str]:
    """The spaces' indexes on this cluster (what a move starts from): the adapter's names but tenant indexes."""
    return [name for name in index_names(client) if not is_tenant_index(name)]


def lift_new_space_index_block_when_idle(client: OpenSearch) -> bool:
    """Lifts `block_new_space_indexes` when no space index is moved (waiting for the switch) nor under a
    move run: a move called off or refused, or every moved index dropped. True when lifted."""
    for name in space_names(client):
        serving = _serving(client, name)
        if serving.moved or index_meta(client, serving.serving).get(RUN_META_KEY):
            return False
    lift_new_space_index_block(client)
    return True
