"""Rebuilds an OpenSearch index to the current analysis (`index_body`) from its own `_source`: nothing is
re-embedded, the vectors are copied.

Every index ends as `versioned_name(name)` behind an alias `name` (the space's name, which the adapter reads
and writes unchanged), as `OpenSearchEngine.ensure_index` creates new ones. A rebuild of `name`:

1. finds the index serving `name`: the one behind the alias, or a legacy concrete index called `name`; refuses
   one a scope move marked moved (`opensearch_scope_move`: it stays blocked until dropped);
2. does nothing when that is `versioned_name(name)` already (the name carries the analysis version);
3. drops a leftover `versioned_name(name)` no alias points at (a crashed run's copy, maybe partial), unless a
   reindex task still writes into it (`_tasks`): then it refuses and says the task;
4. creates `versioned_name(name)` with `index_body` at the serving index's dimension, kNN engine, HNSW
   parameters, shards and replicas;
5. blocks writes on the serving index (`index.blocks.write`), refreshes it, and starts `_reindex` into the
   copy as a task (`wait_for_completion=false`, sent once: a resent POST would start a second copy into the
   same index), then polls the task until it completes; after `timeout` it refuses and keeps the copy (the
   task still writes into it: a re-run refuses until it is done, then drops it);
6. compares the two document counts, and on a difference (or a failed copy) deletes the copy and refuses;
7. swaps in one `POST _aliases` (`add` the alias to the copy, `remove_index` the old index): `name` never
   resolves to no index, nor to two. The old index goes with its block.

The write block is lifted again whenever it refuses or fails before the swap: the old index serves on as it
was. While it is on, every write to `name` is refused with `cluster_block_exception`, which the adapter reads
as busy (the port's IndexUnavailable): the stages retry, the API answers 503 `index_unavailable`, so nothing
written meanwhile is lost. Pausing the stage queues' triggers (their event source mappings) is no longer
needed for correctness, still advisable: a stage blocked past its tries (about a minute) fails its document
visibly. A re-run after a crash at any step converges: before the swap the old index still serves and the
copy is made again; the swap is atomic; after it there is nothing to do. A block a crash left on (its lift
failed too) goes with the old index at the re-run's swap, or by hand: `PUT <index>/_settings
{"index.blocks.write": null}`.

A server without the task API (osmem, the tests' emulator, copies before it answers `_reindex`) is taken at its
word: an answer without a `task` is the finished copy's result, and a `_tasks` call it answers "no handler
found" means no task runs and the copy is done; the count check is the guard.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError, TransportError

from chalicelib.adapters.index.opensearch import (
    ANALYSIS_META_KEY,
    ANALYSIS_VERSION,
    VECTOR_FIELD,
    index_body,
    unversioned,
    versioned_name,
)
from chalicelib.adapters.index.opensearch_names import MOVED_META_KEY
from chalicelib.ports import IndexSpace

#: a rebuild waits this long for `_reindex` to copy the whole index
REINDEX_TIMEOUT = 3600.0
#: seconds between two looks at the copy's task
POLL_SECONDS = 5.0


class RebuildRefused(RuntimeError):
    """The index was left as it was (serving): the message says why."""


class ReindexStillRunning(RuntimeError):
    """A `_reindex` task outlived the caller's wait: it still writes into its target."""


@dataclass(frozen=True)
class RebuildPlan:
    name: str  #: what the adapter addresses: the space's name
    serving: str  #: the concrete index behind `name` now
    analysis: int | None  #: its `_meta` analysis version (None: from before the joiner split)
    dimension: int
    method: dict[str, Any]  #: its vector field's kNN method (engine, HNSW parameters), as created
    leftover: bool = False  #: a copy from a crashed run is there, to drop first
    moved: bool = False  #: a scope move copied its entries into tenant indexes (`MOVED_META_KEY`)

    @property
    def target(self) -> str:
        return versioned_name(self.name)

    @property
    def up_to_date(self) -> bool:
        return self.serving == self.target

    def describe(self) -> str:
        if self.up_to_date:
            return f"{self.name}: up to date ({self.serving}, analysis {self.analysis})"
        return (
            f"{self.name}: {f'drop the leftover {self.target}, ' if self.leftover else ''}copy {self.serving} "
            f"(analysis {self.analysis}, dimension {self.dimension}) into {self.target} (analysis "
            f"{ANALYSIS_VERSION}), then point the alias {self.name} at it"
        )


@dataclass(frozen=True)
class RebuildResult:
    plan: RebuildPlan
    rebuilt: bool
    documents: int  #: in the index serving `name` afterwards (0 when nothing was done or a dry run)


def _is_weknora(mapping: dict[str, Any]) -> bool:
    props = mapping.get("properties", {})
    return props.get(VECTOR_FIELD, {}).get("type") == "knn_vector" and "kb_id" in props


def _mapping(client: OpenSearch, concrete: str) -> dict[str, Any]:
    # keyed by the concrete index's name, whatever name was asked for
    found: dict[str, Any] = client.indices.get_mapping(index=concrete)[concrete]["mappings"]
    return found


def index_meta(client: OpenSearch, concrete: str) -> dict[str, Any]:
    """The index's `_meta` (empty when it has none)."""
    found: dict[str, Any] = _mapping(client, concrete).get("_meta", {})
    return found


def plan_rebuild(client: OpenSearch, name: str) -> RebuildPlan:
    """What a rebuild of `name` (a space's name: an alias, or a legacy concrete index) would do. Refuses an
    index a scope move marked moved: its copy would take writes (no block) the tenant indexes miss, and drop
    the mark, so the switch and `--drop-old` would lose them."""
    plan = serving_plan(client, name)
    if plan.moved:
        raise RebuildRefused(
            f"{name}: moved to its tenants' indexes ({plan.serving} is write-blocked until the scope switch): "
            "not rebuilt; drop it after the switch (scripts/move_opensearch_scope.py --drop-old)"
        )
    return plan


def serving_plan(client: OpenSearch, name: str) -> RebuildPlan:
    """The index serving `name` and what a rebuild of it would do, moved or not (the scope move's start)."""
    try:
        found = client.indices.get_alias(index=name)  # {concrete: {"aliases": ...}}, for an alias or an index
    except NotFoundError:
        raise RebuildRefused(f"{name}: no such index or alias") from None
    if len(found) != 1:
        raise RebuildRefused(f"{name}: names {len(found)} indices, not one")
    (serving,) = found
    if serving == name and found[serving].get("aliases"):
        raise RebuildRefused(f"{name}: an index behind the alias {', '.join(found[serving]['aliases'])}")
    mapping = _mapping(client, serving)
    if not _is_weknora(mapping):
        raise RebuildRefused(f"{name}: not an index of this adapter (no {VECTOR_FIELD} knn_vector)")
    meta = mapping.get("_meta", {})
    vector = mapping["properties"][VECTOR_FIELD]
    plan = RebuildPlan(
        name,
        serving,
        meta.get(ANALYSIS_META_KEY),
        int(vector["dimension"]),
        dict(vector.get("method", {})),
        moved=bool(meta.get(MOVED_META_KEY)),
    )
    if plan.up_to_date:
        if plan.analysis != ANALYSIS_VERSION:
            raise RebuildRefused(
                f"{name}: {serving} holds analysis {plan.analysis}, not the one its name says"
            )
        return plan
    try:
        found = client.indices.get_alias(index=plan.target)
    except NotFoundError:
        return plan
    if any(info.get("aliases") for info in found.values()):  # never drop what serves a name
        raise RebuildRefused(f"{name}: {plan.target} exists behind an alias; not touched")
    return dataclasses.replace(plan, leftover=True)


def target_body(client: OpenSearch, plan: RebuildPlan) -> dict[str, Any]:
    """`index_body` with what the serving index was created with: dimension, kNN engine and HNSW parameters,
    shards and replicas."""
    params = plan.method.get("parameters", {})
    # what the mapping does not say is left to index_body's defaults
    knn: dict[str, Any] = {"knn_engine": plan.method.get("engine")}
    knn.update({k: int(params[k]) for k in ("ef_construction", "m") if k in params})
    settings = client.indices.get_settings(index=plan.serving)[plan.serving]["settings"]["index"]
    auto_expand = settings.get("auto_expand_replicas")
    expands = auto_expand not in (None, "false", False)
    replicas = settings.get("number_of_replicas")
    shards = settings.get("number_of_shards")
    return index_body(
        IndexSpace(model_id=plan.name, dimensions=plan.dimension),  # index_body reads the dimension alone
        shards=int(shards) if shards is not None else None,
        replicas=None if expands or replicas is None else int(replicas),
        auto_expand_replicas=str(auto_expand) if expands else None,
        **{k: v for k, v in knn.items() if v is not None},
    )


def _count(client: OpenSearch, index: str) -> int:
    return int(client.count(index=index)["count"])


def no_task_api(error: TransportError) -> bool:
    """The answer of a server without `_tasks` (osmem: 400 "no handler found for uri ..."), not a task's 404
    (`resource_not_found_exception`) nor any other refusal."""
    return (
        error.status_code in (400, 404)
        and isinstance(error.error, str)
        and error.error.startswith("no handler found")
    )


def running_copies(client: OpenSearch, target: str) -> list[str]:
    """The ids of the reindex tasks writing into `target` now (their description says `to [target]`)."""
    try:
        found = client.tasks.list(actions="*reindex", detailed=True)
    except TransportError as error:
        if no_task_api(error):  # a server that copies before it answers: nothing runs
            return []
        raise
    into = re.compile(rf"\bto \[{re.escape(target)}\]")
    return sorted(
        task_id
        for node in found.get("nodes", {}).values()
        for task_id, task in node.get("tasks", {}).items()
        if into.search(str(task.get("description", "")))
    )


@contextlib.contextmanager
def sent_once(client: OpenSearch) -> Iterator[None]:
    """The client's requests are not resent meanwhile: a `_reindex` POST answered 502/503/504 or timed out may
    have started its task all the same, and a resent one starts another copy into the same index.
    opensearch-py (3.x) has no per-call retry option: its transport reads `max_retries` on each request."""
    transport = client.transport
    retries = transport.max_retries
    transport.max_retries = 0
    try:
        yield
    finally:
        transport.max_retries = retries


def set_write_block(client: OpenSearch, index: str, blocked: bool) -> None:
    # null removes the setting (the index's default: writable)
    client.indices.put_settings(index=index, body={"index": {"blocks": {"write": True if blocked else None}}})


def run_reindex(
    client: OpenSearch,
    body: Mapping[str, Any],
    *,
    timeout: float,
    poll: float,
    still_running: Callable[[str], str],
) -> Mapping[str, Any]:
    """Runs one `_reindex` (sent once) as a task polled to its end; returns its result (`failures` set when the
    task failed). After `timeout` seconds raises ReindexStillRunning with `still_running(task id)`: the task
    goes on writing into its target, which the caller keeps."""
    with sent_once(client):
        started: Mapping[str, Any] = client.reindex(body=body, refresh=True, wait_for_completion=False)
    task = started.get("task")
    if task is None:  # a server that copied before it answered: this is the result
        return started
    deadline = time.monotonic() + timeout
    while True:
        try:
            status: Mapping[str, Any] = client.tasks.get(task_id=task)
        except TransportError as error:
            if no_task_api(error):  # osmem: its task ran before it answered
                return {}
            raise
        if status.get("completed"):
            return {"failures": ["the task failed"]} if status.get("error") else status.get("response", {})
        if time.monotonic() >= deadline:
            raise ReindexStillRunning(still_running(task))
        time.sleep(poll)


def reindex_failed(result: Mapping[str, Any]) -> bool:
    return bool(result.get("failures") or result.get("timed_out"))


def _copy(client: OpenSearch, plan: RebuildPlan, *, timeout: float, poll: float) -> Mapping[str, Any]:
    """Copies the serving index into the target; returns the finished copy's `_reindex` result. After
    `timeout` seconds, refuses with the task left running and the target kept."""
    body = {"source": {"index": plan.serving}, "dest": {"index": plan.target}}
    try:
        return run_reindex(
            client,
            body,
            timeout=timeout,
            poll=poll,
            still_running=lambda task: (
                f"{plan.name}: the copy into {plan.target} still runs as task {task} after {timeout:g}s; "
                f"the old index serves on, {plan.target} is kept while the task writes into it: re-run once "
                f"it is done (GET _tasks/{task}), or cancel it (POST _tasks/{task}/_cancel)"
            ),
        )
    except ReindexStillRunning as running:
        raise RebuildRefused(str(running)) from None


def rebuild_index(
    client: OpenSearch,
    name: str,
    *,
    dry_run: bool = False,
    timeout: float = REINDEX_TIMEOUT,
    poll: float = POLL_SECONDS,
) -> RebuildResult:
    """Brings `name` to `index_body` behind its alias (the steps in the module's docstring). Raises
    RebuildRefused with the old index still serving, writable, when it cannot."""
    plan = plan_rebuild(client, name)
    if plan.up_to_date or dry_run:
        return RebuildResult(plan, rebuilt=False, documents=0)
    if plan.leftover:
        running = running_copies(client, plan.target)
        if running:
            raise RebuildRefused(
                f"{plan.name}: a copy into {plan.target} is still running: task {', '.join(running)}; "
                "re-run once it is done"
            )
        client.indices.delete(index=plan.target)
    client.indices.create(index=plan.target, body=target_body(client, plan))
    swapped = False
    try:
        # inside: a block applied whose answer was lost (a timeout, a gateway's 504) is lifted too
        set_write_block(client, plan.serving, True)
        client.indices.refresh(index=plan.serving)  # the copy reads what was written before the block
        copied = _copy(client, plan, timeout=timeout, poll=poll)
        client.indices.refresh(index=plan.target)
        before, after = _count(client, plan.serving), _count(client, plan.target)
        failed = reindex_failed(copied)
        if failed or before != after:
            client.indices.delete(index=plan.target)
            raise RebuildRefused(
                f"{plan.name}: the copy holds {after} documents, {plan.serving} {before}"
                f"{' (the copy failed)' if failed else ''}; the copy is deleted, the old index serves on"
            )
        client.indices.update_aliases(
            body={
                "actions": [
                    {"add": {"index": plan.target, "alias": plan.name}},
                    {"remove_index": {"index": plan.serving}},
                ]
            }
        )
        swapped = True
    finally:
        if not swapped:
            with contextlib.suppress(NotFoundError):  # the swap went through after all: the index is gone
                set_write_block(client, plan.serving, False)
    return RebuildResult(plan, rebuilt=True, documents=after)


def index_names(client: OpenSearch) -> list[str]:
    """The names the adapter addresses on this cluster: each alias in front of a `versioned_name` of itself,
    and each legacy concrete index of the adapter's mapping. A `versioned_name` no alias points at is a
    crashed rebuild's leftover, rebuilt with its name, not a name of its own."""
    aliases = client.indices.get_alias(index="*")  # open indices: no hidden system index
    names: set[str] = set()
    for concrete, mappings in client.indices.get_mapping(index="*").items():
        if concrete.startswith(".") or not _is_weknora(mappings["mappings"]):
            continue
        alias = unversioned(concrete)
        if alias is None:
            names.add(concrete)
        elif alias in aliases.get(concrete, {}).get("aliases", {}):
            names.add(alias)
    return sorted(names)
