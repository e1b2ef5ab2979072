"""Rebuilds an OpenSearch index to the current analysis (`index_body`) from its own `_source`: nothing is
re-embedded, the vectors are copied.

Every index ends as `versioned_name(name)` behind an alias `name` (the space's name, which the adapter reads
and writes unchanged), as `OpenSearchEngine.ensure_index` creates new ones. A rebuild of `name`:

1. finds the index serving `name`: the one behind the alias, or a legacy concrete index called `name`;
2. does nothing when that is `versioned_name(name)` already (the name carries the analysis version);
3. drops a leftover `versioned_name(name)` no alias points at (a crashed run's copy, maybe partial);
4. creates `versioned_name(name)` with `index_body` at the serving index's dimension, kNN engine, HNSW
   parameters, shards and replicas, and `_reindex`es the serving index into it;
5. compares the two document counts, and on a difference deletes the copy and refuses (the old index
   keeps serving);
6. swaps in one `POST _aliases` (`add` the alias to the copy, `remove_index` the old index): `name` never
   resolves to no index, nor to two.

Writes made during the copy are not carried over: pause the stage queues' triggers (their event source
mappings) while it runs. The count check catches a document added or deleted meanwhile, not an update (a
switch, a move) of one already copied: pausing is the rule, the check its guard. A re-run after a crash at
any step converges: before the swap the old index still serves and the copy is made again; the swap is
atomic; after it there is nothing to do.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from opensearchpy import OpenSearch
from opensearchpy.exceptions import NotFoundError

from chalicelib.adapters.index.opensearch import (
    ANALYSIS_VERSION,
    VECTOR_FIELD,
    index_body,
    versioned_name,
)
from chalicelib.ports import IndexSpace

#: a rebuild waits this long for `_reindex` to copy the whole index
REINDEX_TIMEOUT = 3600.0


class RebuildRefused(RuntimeError):
    """The index was left as it was (serving): the message says why."""


@dataclass(frozen=True)
class RebuildPlan:
    name: str  #: what the adapter addresses: the space's name
    serving: str  #: the concrete index behind `name` now
    analysis: int | None  #: its `_meta.weknora_analysis` (None: from before the joiner split)
    dimension: int
    leftover: bool = False  #: a copy from a crashed run is there, to drop first

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


def plan_rebuild(client: OpenSearch, name: str) -> RebuildPlan:
    """What a rebuild of `name` (a space's name: an alias, or a legacy concrete index) would do."""
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
    analysis = mapping.get("_meta", {}).get("weknora_analysis")
    dimension = int(mapping["properties"][VECTOR_FIELD]["dimension"])
    plan = RebuildPlan(name, serving, analysis, dimension)
    if plan.up_to_date:
        if analysis != ANALYSIS_VERSION:
            raise RebuildRefused(f"{name}: {serving} holds analysis {analysis}, not the one its name says")
        return plan
    try:
        found = client.indices.get_alias(index=plan.target)
    except NotFoundError:
        return plan
    if any(info.get("aliases") for info in found.values()):  # never drop what serves a name
        raise RebuildRefused(f"{name}: {plan.target} exists behind an alias; not touched")
    return dataclasses.replace(plan, leftover=True)


def _target_body(client: OpenSearch, plan: RebuildPlan) -> dict[str, Any]:
    """`index_body` with what the serving index was created with: dimension, kNN engine and HNSW parameters,
    shards and replicas."""
    method = _mapping(client, plan.serving)["properties"][VECTOR_FIELD].get("method", {})
    params = method.get("parameters", {})
    settings = client.indices.get_settings(index=plan.serving)[plan.serving]["settings"]["index"]
    auto_expand = settings.get("auto_expand_replicas")
    expands = auto_expand not in (None, "false", False)
    replicas = settings.get("number_of_replicas")
    shards = settings.get("number_of_shards")
    return index_body(
        IndexSpace(model_id=plan.name, dimensions=plan.dimension),  # index_body reads the dimension alone
        knn_engine=method.get("engine", "lucene"),
        shards=int(shards) if shards is not None else None,
        replicas=None if expands or replicas is None else int(replicas),
        auto_expand_replicas=str(auto_expand) if expands else None,
        ef_construction=int(params.get("ef_construction", 128)),
        m=int(params.get("m", 16)),
    )


def _count(client: OpenSearch, index: str) -> int:
    return int(client.count(index=index)["count"])


def rebuild_index(
    client: OpenSearch, name: str, *, dry_run: bool = False, timeout: float = REINDEX_TIMEOUT
) -> RebuildResult:
    """Brings `name` to `index_body` behind its alias (the steps in the module's docstring). Raises
    RebuildRefused with the old index still serving when it cannot."""
    plan = plan_rebuild(client, name)
    if plan.up_to_date or dry_run:
        return RebuildResult(plan, rebuilt=False, documents=0)
    if plan.leftover:
        client.indices.delete(index=plan.target)
    client.indices.create(index=plan.target, body=_target_body(client, plan))
    copied = client.reindex(
        body={"source": {"index": plan.serving}, "dest": {"index": plan.target}},
        refresh=True,
        wait_for_completion=True,
        request_timeout=timeout,
    )
    client.indices.refresh(index=plan.target)
    before, after = _count(client, plan.serving), _count(client, plan.target)
    failed = bool(copied.get("failures") or copied.get("timed_out"))
    if failed or before != after:
        client.indices.delete(index=plan.target)
        why = "the copy failed" if failed else "were the stage queues' triggers paused?"
        raise RebuildRefused(
            f"{plan.name}: the copy holds {after} documents, {plan.serving} {before} ({why}); "
            "the copy is deleted, the old index serves on"
        )
    client.indices.update_aliases(
        body={
            "actions": [
                {"add": {"index": plan.target, "alias": plan.name}},
                {"remove_index": {"index": plan.serving}},
            ]
        }
    )
    return RebuildResult(plan, rebuilt=True, documents=_count(client, plan.name))


_VERSIONED = re.compile(r"(?P<name>.+)-a\d+")


def index_names(client: OpenSearch) -> list[str]:
    """The names the adapter addresses on this cluster: each alias in front of a `versioned_name` of itself,
    and each legacy concrete index of the adapter's mapping. A `versioned_name` no alias points at is a
    crashed rebuild's leftover, rebuilt with its name, not a name of its own."""
    aliases = client.indices.get_alias(index="*")  # open indices: no hidden system index
    names: set[str] = set()
    for concrete, mappings in client.indices.get_mapping(index="*").items():
        if concrete.startswith(".") or not _is_weknora(mappings["mappings"]):
            continue
        versioned = _VERSIONED.fullmatch(concrete)
        if versioned is None:
            names.add(concrete)
        elif versioned["name"] in aliases.get(concrete, {}).get("aliases", {}):
            names.add(versioned["name"])
    return sorted(names)


def rebuild_all(
    client: OpenSearch, *, dry_run: bool = False, timeout: float = REINDEX_TIMEOUT
) -> list[RebuildResult]:
    """`rebuild_index` for every name of `index_names`, one after another; stops at the first refusal."""
    return [rebuild_index(client, name, dry_run=dry_run, timeout=timeout) for name in index_names(client)]
