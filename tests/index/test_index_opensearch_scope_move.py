"""The operator's scope move (`opensearch_scope_move`) on osmem: a space's index holding two tenants' entries is
copied into each tenant's index (vectors as stored, nothing re-embedded), verified by counts per tenant; searched
in the "tenant" scope each tenant finds its entries alone, scored by its own statistics; a re-run after a crash
mid-copy converges without duplicates; writes during the move, and after it until the scope switch, are refused
as busy; the old index is dropped on the explicit flag alone. osmem rejects `knn` queries, so the vectors are
compared as stored (`_source`), which is what a knn query reads."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from index_contract import DIM, entry, ids, vec

from chalicelib.adapters.index import opensearch_scope_move as sm
from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client, versioned_name
from chalicelib.adapters.index.opensearch_names import index_name
from chalicelib.adapters.index.opensearch_rebuild import RebuildRefused, rebuild_index, set_write_block
from chalicelib.adapters.index.opensearch_scope_move import (
    COPY_META_KEY,
    MOVED_META_KEY,
    MoveRefused,
    move_to_tenant_scope,
    plan_move,
    reopen,
    space_names,
)
from chalicelib.ports import IndexSpace, IndexUnavailable

OWNERS = {"kb-a": "tenant-a", "kb-a2": "tenant-a", "kb-b": "tenant-b"}  # kb-gone: deleted
DOCS = [
    entry("a1", "The quarterly zorblax figures are attached", kb="kb-a", knowledge="memo", vector=vec(1, 0)),
    entry("a2", "Harbour fees rose again this spring", kb="kb-a", knowledge="fees", vector=vec(0, 1)),
    entry("a3", "Zorblax harbour inspection notes", kb="kb-a2", knowledge="notes", vector=vec(1, 1)),
    entry("b1", "zorblax zorblax zorblax harbour", kb="kb-b", knowledge="spam", vector=vec(0, 0, 1)),
    entry("b2", "Minutes of the harbour board", kb="kb-b", knowledge="minutes", vector=vec(1, 0, 1)),
    entry("g1", "An entry whose knowledge base is gone", kb="kb-gone", knowledge="old", vector=vec(0, 1, 1)),
]
BY_TENANT = {"tenant-a": {"a1", "a2", "a3"}, "tenant-b": {"b1", "b2"}}


class Crash(Exception):
    pass


def owners(kb_ids: Sequence[str]) -> Mapping[str, str]:
    return {kb: OWNERS[kb] for kb in kb_ids if kb in OWNERS}


@pytest.fixture
def space() -> IndexSpace:
    return IndexSpace(model_id=f"test-move-{uuid.uuid4().hex[:8]}", dimensions=DIM)


@pytest.fixture
def spaced(osmem_url: str) -> OpenSearchEngine:
    """The engine of a stack in the "space" scope (before the switch)."""
    return OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)


@pytest.fixture
def tenanted(osmem_url: str) -> OpenSearchEngine:
    """The engine of the stack after the switch to the "tenant" scope."""
    return OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True, tenant_of=OWNERS.get)


def _stored(engine: OpenSearchEngine, index: str) -> dict[str, dict[str, Any]]:
    hits = engine.client.search(index=index, body={"size": 100, "query": {"match_all": {}}})["hits"]["hits"]
    assert len({hit["_id"] for hit in hits}) == len(hits)
    return {hit["_id"]: hit["_source"] for hit in hits}


def _blocked(engine: OpenSearchEngine, index: str) -> bool:
    concrete = next(iter(engine.client.indices.get_alias(index=index)))
    settings = engine.client.indices.get_settings(index=concrete)[concrete]["settings"]["index"]
    return str(settings.get("blocks", {}).get("write", "false")) == "true"


def _meta(engine: OpenSearchEngine, index: str) -> dict[str, Any]:
    concrete = next(iter(engine.client.indices.get_alias(index=index)))
    found: dict[str, Any] = engine.client.indices.get_mapping(index=concrete)[concrete]["mappings"]["_meta"]
    return found


def _scores(engine: OpenSearchEngine, space: IndexSpace, kb_id: str) -> list[tuple[str, float]]:
    hits = engine.hybrid_search(space, kb_id, "zorblax harbour", None, 5, vector=False)
    return [(hit.id, round(hit.score, 6)) for hit in hits]


def _tenant_ids(engine: OpenSearchEngine, space: IndexSpace) -> dict[str, set[str]]:
    return {tenant: set(_stored(engine, index_name(space, tenant))) for tenant in BY_TENANT}


def test_each_tenants_entries_move_into_its_index_and_are_found_there_alone(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace, osmem_url: str
) -> None:
    spaced.batch_index(space, DOCS)
    before = _stored(spaced, space.name)
    assert tenanted.hybrid_search(space, "kb-a", "zorblax", None, 5, vector=False) == []  # not moved yet

    result = move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)

    assert result.moved and not result.dropped
    assert [(t.tenant_id, t.kb_ids, t.documents) for t in result.plan.tenants] == [
        ("tenant-a", ("kb-a", "kb-a2"), 3),
        ("tenant-b", ("kb-b",), 2),
    ]
    assert result.plan.orphans == 1  # kb-gone's entry stays behind, with the old index
    assert _tenant_ids(tenanted, space) == BY_TENANT  # each tenant's entries, only theirs, once
    for tenant in BY_TENANT:
        for doc_id, source in _stored(tenanted, index_name(space, tenant)).items():
            assert source == before[doc_id]  # the vectors (and every field) as stored: nothing re-embedded
    assert {kb: tenanted.count(space, kb) for kb in OWNERS} == {"kb-a": 2, "kb-a2": 1, "kb-b": 2}
    assert set(ids(tenanted.hybrid_search(space, "kb-a", "zorblax harbour", None, 5, vector=False))) == {
        "a1",
        "a2",
    }
    assert ids(tenanted.hybrid_search(space, "kb-b", "minutes", None, 5, vector=False)) == ["b2"]
    # each tenant's BM25 statistics are its own: the scores of an index that only ever held tenant-a's entries
    fresh = IndexSpace(model_id=f"test-fresh-{uuid.uuid4().hex[:8]}", dimensions=DIM)
    tenanted.batch_index(fresh, [d for d in DOCS if d.id in BY_TENANT["tenant-a"]])
    assert _scores(tenanted, space, "kb-a") == _scores(tenanted, fresh, "kb-a")
    # in the shared index, tenant-b's spam weighed on them
    assert _scores(spaced, space, "kb-a") != _scores(tenanted, space, "kb-a")
    # the tenant index is what the adapter creates: behind its alias, at the space's dimension
    concrete = versioned_name(index_name(space, "tenant-a"))
    mapping = tenanted.client.indices.get_mapping(index=concrete)[concrete]["mappings"]
    assert mapping["properties"]["embedding"]["dimension"] == DIM
    assert mapping["_meta"][COPY_META_KEY] == versioned_name(space.name)
    assert _meta(spaced, space.name)[MOVED_META_KEY] is True
    assert space_names(spaced.client) == [space.name]  # the tenant indexes are no spaces to move


def test_writes_during_the_move_and_until_the_switch_are_refused_as_busy(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The space's index is write-blocked from the copy on: a write of the "space" stack (a stage's upsert, the
    API's switch, a move) is the port's IndexUnavailable (retried, 503), never accepted into an index the
    copies no longer read. After the switch, the "tenant" stack writes into the tenant indexes. (osmem deletes
    through a write block, which OpenSearch refuses as it refuses the rest: deletes are not among these.)"""
    spaced.batch_index(space, DOCS)
    reindex = spaced.client.reindex
    refused: list[str] = []
    writes = {
        "upsert": lambda: spaced.batch_index(space, [entry("late", "A zorblax note", kb="kb-a")]),
        "switch": lambda: spaced.set_enabled(space, "kb-b", ["b1"], False),
        "move": lambda: spaced.move_knowledge(space, "kb-a", "kb-a2", ["memo"]),
    }

    def copy_with_writes_meanwhile(*args: Any, **kwargs: Any) -> Any:
        answer = reindex(*args, **kwargs)
        for what, write in writes.items():
            with pytest.raises(IndexUnavailable):
                write()
            refused.append(what)
        return answer

    monkeypatch.setattr(spaced.client, "reindex", copy_with_writes_meanwhile)
    move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    monkeypatch.undo()

    assert refused == ["upsert", "switch", "move"] * 2  # one copy per tenant
    assert _blocked(spaced, space.name)  # until the switch: the "space" stack's writes wait
    for write in writes.values():
        with pytest.raises(IndexUnavailable):
            write()
    assert "a1" in ids(spaced.hybrid_search(space, "kb-a", "zorblax", None, 5, vector=False))  # reads go on
    writes_after_the_switch = {
        "upsert": lambda: tenanted.batch_index(space, [entry("late", "A zorblax note", kb="kb-a")]),
        "switch": lambda: tenanted.set_enabled(space, "kb-b", ["b1"], False),
        "move": lambda: tenanted.move_knowledge(space, "kb-a", "kb-a2", ["memo"]),
    }
    for write in writes_after_the_switch.values():
        write()
    assert ids(tenanted.hybrid_search(space, "kb-a", "zorblax", None, 5, vector=False)) == ["late"]
    assert "a1" in ids(tenanted.hybrid_search(space, "kb-a2", "zorblax", None, 5, vector=False))
    assert ids(tenanted.hybrid_search(space, "kb-b", "zorblax", None, 5, vector=False)) == []


@pytest.mark.parametrize("crash_at", ["second copy", "mark"])
def test_a_rerun_after_a_crash_mid_move_converges_without_duplicates(
    spaced: OpenSearchEngine,
    tenanted: OpenSearchEngine,
    space: IndexSpace,
    monkeypatch: pytest.MonkeyPatch,
    crash_at: str,
) -> None:
    """Before the mark the space's index is the truth: the crash lifts the block, the "space" stack writes on
    (here a delete of an entry already copied, and a new entry), and the re-run makes every copy again, fresh:
    nothing doubled, nothing deleted meanwhile comes back."""
    spaced.batch_index(space, DOCS)
    reindex, put_mapping = spaced.client.reindex, spaced.client.indices.put_mapping
    calls: list[int] = []

    def crash_on_the_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise Crash()
        return reindex(*args, **kwargs)

    def crash_on_the_mark(*args: Any, **kwargs: Any) -> Any:
        if kwargs["body"]["_meta"].get(MOVED_META_KEY):
            raise Crash()
        return put_mapping(*args, **kwargs)

    with monkeypatch.context() as patched:
        if crash_at == "second copy":
            patched.setattr(spaced.client, "reindex", crash_on_the_second)
        else:
            patched.setattr(spaced.client.indices, "put_mapping", crash_on_the_mark)
        with pytest.raises(Crash):
            move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    assert not _blocked(spaced, space.name) and not _meta(spaced, space.name).get(MOVED_META_KEY)
    assert set(_stored(spaced, index_name(space, "tenant-a"))) == BY_TENANT["tenant-a"]  # a scratch copy
    spaced.delete_by_ids(space, "kb-a", ["a1"])
    spaced.batch_index(space, [entry("a4", "Zorblax delivery schedule", kb="kb-a2", vector=vec(1, 0, 0, 1))])

    result = move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)

    assert result.moved
    assert _tenant_ids(tenanted, space) == {"tenant-a": {"a2", "a3", "a4"}, "tenant-b": {"b1", "b2"}}
    assert {kb: tenanted.count(space, kb) for kb in OWNERS} == {"kb-a": 1, "kb-a2": 2, "kb-b": 2}
    assert not move_to_tenant_scope(
        spaced.client, space.name, owners, orphans=1
    ).moved  # moved: a re-run does nothing


def test_a_count_difference_refuses_and_the_space_index_serves_on_writable(
    spaced: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    spaced.batch_index(space, DOCS)
    reindex = spaced.client.reindex

    def a_short_copy(*args: Any, **kwargs: Any) -> Any:
        answer = reindex(*args, **kwargs)
        spaced.client.delete(index=versioned_name(index_name(space, "tenant-a")), id="a2", refresh=True)
        return answer

    monkeypatch.setattr(spaced.client, "reindex", a_short_copy)
    with pytest.raises(MoveRefused, match=r"the copy holds 2 entries, .* 3 of tenant tenant-a"):
        move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    monkeypatch.undo()

    assert not _blocked(spaced, space.name) and not _meta(spaced, space.name).get(MOVED_META_KEY)
    assert not spaced.client.indices.exists(index=index_name(space, "tenant-a"))  # the short copy is deleted
    spaced.batch_index(space, [entry("late", "written after the refusal", kb="kb-b")])
    assert move_to_tenant_scope(spaced.client, space.name, owners, orphans=1).moved


def test_the_old_index_is_dropped_on_the_flag_and_only_once_moved(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace
) -> None:
    spaced.batch_index(space, DOCS)
    with pytest.raises(MoveRefused, match="not moved yet"):
        move_to_tenant_scope(spaced.client, space.name, owners, orphans=1, drop_old=True)
    assert not _blocked(spaced, space.name)
    move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    assert not move_to_tenant_scope(
        spaced.client, space.name, owners, orphans=1, drop_old=True, dry_run=True
    ).dropped
    assert spaced.client.indices.exists(index=space.name)

    dropped = move_to_tenant_scope(spaced.client, space.name, owners, orphans=1, drop_old=True)

    assert dropped.dropped and not spaced.client.indices.exists(index=space.name)
    assert _tenant_ids(tenanted, space) == BY_TENANT
    assert ids(tenanted.hybrid_search(space, "kb-b", "minutes", None, 5, vector=False)) == ["b2"]


def test_a_tenant_index_the_stack_wrote_is_not_touched(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace
) -> None:
    """A tenant index no move made (the stack's scope is "tenant" already, or was): the move refuses before
    dropping anything, and the space's index serves on writable."""
    spaced.batch_index(space, DOCS)
    tenanted.batch_index(space, [entry("b9", "written in the tenant scope", kb="kb-b")])
    with pytest.raises(MoveRefused, match=r"no copy of .* by a move"):
        move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    assert set(_stored(tenanted, index_name(space, "tenant-b"))) == {"b9"}
    assert not _blocked(spaced, space.name) and not _meta(spaced, space.name).get(MOVED_META_KEY)


def test_reopen_undoes_a_move_and_the_next_move_copies_afresh(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace
) -> None:
    spaced.batch_index(space, DOCS)
    move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    reopen(spaced.client, space.name, owners)
    assert not _blocked(spaced, space.name) and not plan_move(spaced.client, space.name, owners).moved
    spaced.delete_by_ids(space, "kb-b", ["b1"])  # the "space" stack writes on
    assert move_to_tenant_scope(spaced.client, space.name, owners, orphans=1).moved
    assert _tenant_ids(tenanted, space) == {"tenant-a": BY_TENANT["tenant-a"], "tenant-b": {"b2"}}


def test_a_name_that_is_no_space_index_is_refused(spaced: OpenSearchEngine, space: IndexSpace) -> None:
    with pytest.raises(MoveRefused, match="no such index"):
        move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    spaced.batch_index(space, DOCS)
    move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    with pytest.raises(MoveRefused, match="not the index of a space"):
        move_to_tenant_scope(spaced.client, index_name(space, "tenant-a"), owners)


def test_the_operator_script_dry_run_then_move_then_drop(
    spaced: OpenSearchEngine,
    tenanted: OpenSearchEngine,
    space: IndexSpace,
    osmem_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = Path(__file__).resolve().parents[2] / "scripts" / "move_opensearch_scope.py"
    spec = importlib.util.spec_from_file_location("move_opensearch_scope", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "state_owners", lambda settings: owners)  # the stack's tables: the test's
    spaced.batch_index(space, DOCS)

    assert script.main(["--all", "--dry-run", "--url", osmem_url]) == 0
    out = capsys.readouterr().out
    assert f"dry run: {space.name}: copy 3 into {index_name(space, 'tenant-a')}" in out
    assert "1 entries of no knowledge base still there (deleted, or no kb_id) stay behind" in out
    assert not spaced.client.indices.exists(index=index_name(space, "tenant-a"))

    # the old index goes only where the operator says the stack reads tenant indexes, and once moved
    stack = script.get_settings()
    monkeypatch.setattr(script, "get_settings", lambda: replace(stack, opensearch_index_scope="space"))
    with pytest.raises(SystemExit):
        script.main(["--all", "--drop-old", "--url", osmem_url])
    assert "deploy OpenSearchIndexScope=tenant first" in capsys.readouterr().err
    monkeypatch.setattr(script, "get_settings", lambda: replace(stack, opensearch_index_scope="tenant"))
    assert script.main(["--index", space.name, "--drop-old", "--url", osmem_url]) == 1
    assert "refused: " in capsys.readouterr().err
    assert script.main(["--index", space.name, "--orphans", "1", "--url", osmem_url]) == 0
    assert f"{space.name}: moved" in capsys.readouterr().out
    assert _tenant_ids(tenanted, space) == BY_TENANT
    assert script.main(["--all", "--drop-old", "--url", osmem_url]) == 0
    assert not spaced.client.indices.exists(index=space.name)


TASK = "node-1:7"


@pytest.mark.parametrize("outcome", ["completed", "failed", "still running"])
def test_each_copy_is_a_task_polled_to_its_end(
    spaced: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """Where the server answers `_reindex` with a task (osmem copies before it answers, and has no `_tasks`):
    the move polls it; a failed task refuses; a task still running at the timeout refuses naming it, and a
    re-run refuses while it writes into the copy (the copy is not dropped under it)."""
    spaced.batch_index(space, DOCS)
    reindex = spaced.client.reindex
    last = {
        "completed": {"completed": True, "response": {"failures": []}},
        "failed": {"completed": True, "error": {"type": "search_phase_execution_exception"}},
        "still running": {"completed": False},
    }[outcome]
    polls: list[dict[str, Any]] = []

    def as_a_task(*args: Any, **kwargs: Any) -> Any:
        reindex(*args, **kwargs)
        return {"task": TASK}

    def poll(task_id: str) -> dict[str, Any]:
        assert task_id == TASK
        polls.append(last)
        return {"completed": False} if len(polls) % 2 else last

    monkeypatch.setattr(spaced.client, "reindex", as_a_task)
    monkeypatch.setattr(spaced.client.tasks, "get", poll)
    if outcome == "completed":
        assert move_to_tenant_scope(spaced.client, space.name, owners, orphans=1, poll=0).moved
        assert len(polls) == 4  # two per tenant: running, then done
        return
    with pytest.raises(
        MoveRefused, match="copy failed" if outcome == "failed" else f"still runs as task {TASK}"
    ):
        move_to_tenant_scope(
            spaced.client, space.name, owners, orphans=1, poll=0, timeout=0 if outcome != "failed" else 60
        )
    assert not _blocked(spaced, space.name) and not _meta(spaced, space.name).get(MOVED_META_KEY)
    if outcome == "failed":
        assert not spaced.client.indices.exists(
            index=index_name(space, "tenant-a")
        )  # the failed copy is deleted
    if outcome == "still running":
        copy = versioned_name(index_name(space, "tenant-a"))
        running = {"nodes": {"n": {"tasks": {TASK: {"description": f"reindex from [x] to [{copy}]"}}}}}
        monkeypatch.setattr(spaced.client.tasks, "list", lambda **kwargs: running)
        with pytest.raises(MoveRefused, match=f"a copy into {copy} is still running: task {TASK}"):
            move_to_tenant_scope(spaced.client, space.name, owners, orphans=1, poll=0, timeout=0)
        assert spaced.client.indices.exists(index=copy)


def test_a_mark_whose_answer_is_lost_keeps_the_block(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark went through but its answer did not: the index is moved, so its block stays on (a write the
    "space" stack made now would be missing from the copies) and a re-run finds it moved."""
    spaced.batch_index(space, DOCS)
    put_mapping = spaced.client.indices.put_mapping

    def answer_lost(*args: Any, **kwargs: Any) -> Any:
        answer = put_mapping(*args, **kwargs)
        if kwargs["body"]["_meta"].get(MOVED_META_KEY):
            raise Crash()
        return answer

    with monkeypatch.context() as patched:
        patched.setattr(spaced.client.indices, "put_mapping", answer_lost)
        with pytest.raises(Crash):
            move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    assert _blocked(spaced, space.name) and _meta(spaced, space.name)[MOVED_META_KEY] is True
    with pytest.raises(IndexUnavailable):
        spaced.batch_index(space, [entry("late", "A zorblax note", kb="kb-a")])
    assert plan_move(spaced.client, space.name, owners).moved
    assert _tenant_ids(tenanted, space) == BY_TENANT


# --- the reviewer's findings (rev_scope F1-F6) ---------------------------------------------------------------

OWNED = [d for d in DOCS if d.kb_id in OWNERS]  # no entry of a gone knowledge base: no `orphans` to give
RUN_KEY = "weknora_scope_move_run"  # sm.RUN_META_KEY


def test_a_second_run_refuses_without_lifting_the_first_runs_block(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F1: a run started while another copies refuses before touching anything: the block the first run
    holds stays on (a write meanwhile is refused as busy), its copies are not dropped, and it marks the
    index moved with every entry in the copies."""
    spaced.batch_index(space, OWNED)
    serving = versioned_name(space.name)
    real = sm._reindex
    second = versioned_name(index_name(space, "tenant-b"))
    seen: list[str] = []

    def first_run_copy(client: Any, body: Any, target: str, **kwargs: Any) -> bool:
        ok = real(client, body, target, **kwargs)
        if target == second and not seen:
            seen.append(target)
            with monkeypatch.context() as patched:  # the second run, while the first run's task runs
                patched.setattr(sm, "_reindex", real)
                patched.setattr(sm, "running_copies", lambda c, t: ["node:42"] if t == second else [])
                with pytest.raises(MoveRefused, match="another move"):
                    move_to_tenant_scope(spaced.client, space.name, owners)
            assert _blocked(spaced, space.name)  # still the first run's
            assert set(_stored(spaced, index_name(space, "tenant-a"))) == BY_TENANT["tenant-a"]
            with pytest.raises(IndexUnavailable):
                spaced.batch_index(space, [entry("late", "A zorblax note", kb="kb-a")])
        return ok

    monkeypatch.setattr(sm, "_reindex", first_run_copy)
    assert move_to_tenant_scope(spaced.client, space.name, owners).moved
    monkeypatch.undo()

    assert seen and _blocked(spaced, space.name)
    assert not sm.index_meta(spaced.client, serving).get(sm.RUN_META_KEY)  # the token goes with the mark
    assert _tenant_ids(tenanted, space) == BY_TENANT


def test_a_killed_runs_block_is_taken_over_on_the_flag_alone(
    spaced: OpenSearchEngine, tenanted: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F1: a run killed mid-copy leaves its token and block: a re-run refuses and leaves both; with
    `take_over` it moves. A run whose index another run took over stops before its mark, block untouched."""
    spaced.batch_index(space, OWNED)
    serving = versioned_name(space.name)
    killed = {**_meta(spaced, space.name), RUN_KEY: "killed-run"}
    spaced.client.indices.put_mapping(index=serving, body={"_meta": killed})
    set_write_block(spaced.client, serving, True)

    with pytest.raises(MoveRefused, match=r"another move .*--take-over"):
        move_to_tenant_scope(spaced.client, space.name, owners)
    assert _blocked(spaced, space.name) and _meta(spaced, space.name)[RUN_KEY] == "killed-run"
    assert sm.RUN_META_KEY == RUN_KEY

    real = sm._reindex

    def taken_over_meanwhile(client: Any, body: Any, target: str, **kwargs: Any) -> bool:
        ok = real(client, body, target, **kwargs)
        other = {**sm.index_meta(client, serving), sm.RUN_META_KEY: "another-run"}
        client.indices.put_mapping(index=serving, body={"_meta": other})
        return ok

    with monkeypatch.context() as patched:
        patched.setattr(sm, "_reindex", taken_over_meanwhile)
        with pytest.raises(MoveRefused, match=r"took .* over"):
            move_to_tenant_scope(spaced.client, space.name, owners, take_over=True)
    assert _blocked(spaced, space.name) and not _meta(spaced, space.name).get(MOVED_META_KEY)

    assert move_to_tenant_scope(spaced.client, space.name, owners, take_over=True).moved
    assert _tenant_ids(tenanted, space) == BY_TENANT


def _script(monkeypatch: pytest.MonkeyPatch, scope: str, owners_of: Any = owners) -> Any:
    path = Path(__file__).resolve().parents[2] / "scripts" / "move_opensearch_scope.py"
    spec = importlib.util.spec_from_file_location("move_opensearch_scope", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "state_owners", lambda settings: owners_of)
    stack = script.get_settings()
    monkeypatch.setattr(script, "get_settings", lambda: replace(stack, opensearch_index_scope=scope))
    return script


def _template_exists(engine: OpenSearchEngine, name: str) -> bool:
    return bool(engine.client.indices.exists_index_template(name=name))


def test_a_space_index_made_during_the_move_is_blocked_and_moved_too(
    spaced: OpenSearchEngine,
    tenanted: OpenSearchEngine,
    space: IndexSpace,
    osmem_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F2: a model's first entry after `--all` listed the spaces makes a new space index: it is write-blocked
    (index templates) so the write waits for the switch, and `--all` lists again and moves it. The tenant
    indexes stay writable; the switch's writes land in them."""
    new = IndexSpace(model_id=f"test-new-{uuid.uuid4().hex[:8]}", dimensions=DIM)
    spaced.batch_index(space, OWNED)

    def owners_making_a_space(kb_ids: Sequence[str]) -> Mapping[str, str]:
        if not spaced.client.indices.exists(index=new.name):  # mid-move, before the deploy
            with pytest.raises(IndexUnavailable):
                spaced.batch_index(new, [entry("c1", "An FAQ entry on a new model", kb="kb-a")])
        return owners(kb_ids)

    script = _script(monkeypatch, "space", owners_making_a_space)
    assert script.main(["--all", "--url", osmem_url]) == 0

    assert spaced.client.indices.exists(index=new.name)
    assert plan_move(spaced.client, new.name, owners).moved and _blocked(spaced, new.name)
    tenanted.batch_index(new, [entry("c1", "An FAQ entry on a new model", kb="kb-a")])  # after the switch
    assert ids(tenanted.hybrid_search(new, "kb-a", "FAQ", None, 5, vector=False)) == ["c1"]
    assert _template_exists(spaced, sm.SPACE_TEMPLATE)  # until the old indexes are dropped


def test_drop_old_all_drops_every_moved_index_and_names_each_unmoved_one(
    spaced: OpenSearchEngine,
    space: IndexSpace,
    osmem_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """F2: `--drop-old --all` carries on past an index not moved and names it at the end (exit 1); the
    templates blocking new space indexes go once no moved index is left."""
    unmoved = IndexSpace(model_id=f"aa-unmoved-{uuid.uuid4().hex[:8]}", dimensions=DIM)  # listed first
    spaced.batch_index(space, OWNED)
    spaced.batch_index(unmoved, [entry("u1", "never moved", kb="kb-a")])
    assert move_to_tenant_scope(spaced.client, space.name, owners).moved
    script = _script(monkeypatch, "tenant")

    assert script.main(["--all", "--drop-old", "--url", osmem_url]) == 1

    assert not spaced.client.indices.exists(index=space.name)  # dropped although the other was refused
    assert spaced.client.indices.exists(index=unmoved.name)
    assert f"not dropped (not moved yet: move them first): {unmoved.name}" in capsys.readouterr().err
    assert not _template_exists(spaced, sm.SPACE_TEMPLATE)


def test_reopen_is_refused_after_the_switch(
    spaced: OpenSearchEngine,
    tenanted: OpenSearchEngine,
    space: IndexSpace,
    osmem_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """F3: after the switch the tenant indexes take the writes; a reopen and a new move would drop them. The
    script refuses `--reopen` in the "tenant" scope; `reopen` refuses once a tenant index differs from the
    space's index (whatever the operator's variable says)."""
    spaced.batch_index(space, OWNED)
    assert move_to_tenant_scope(spaced.client, space.name, owners).moved
    tenanted.batch_index(space, [entry("a9", "written after the switch", kb="kb-a")])

    with pytest.raises(SystemExit):
        _script(monkeypatch, "tenant").main(["--all", "--reopen", "--url", osmem_url])
    assert "scope is `tenant` already" in capsys.readouterr().err
    assert _script(monkeypatch, "space").main(["--all", "--reopen", "--url", osmem_url]) == 1
    assert "not reopened" in capsys.readouterr().err

    assert _blocked(spaced, space.name) and plan_move(spaced.client, space.name, owners).moved
    assert "a9" in _stored(tenanted, index_name(space, "tenant-a"))


def test_a_moved_index_is_not_rebuilt(spaced: OpenSearchEngine, osmem_url: str, space: IndexSpace) -> None:
    """F4: a moved index of an older analysis (a legacy concrete one here): the rebuild refuses it; its copy
    would be writable and unmarked, and the writes to it lost at the switch."""
    legacy = OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True, aliased=False)
    legacy.batch_index(space, OWNED)
    assert move_to_tenant_scope(legacy.client, space.name, owners).moved

    with pytest.raises(RebuildRefused, match="moved to its tenants' indexes"):
        rebuild_index(legacy.client, space.name, poll=0)

    assert legacy.client.indices.exists(index=space.name) and _blocked(legacy, space.name)
    assert plan_move(legacy.client, space.name, owners).moved


def test_entries_of_no_tenant_are_left_behind_only_when_counted(
    spaced: OpenSearchEngine, space: IndexSpace
) -> None:
    """F5: owners found for no knowledge base (the wrong stack's tables) never marks an index holding entries
    moved; entries of no tenant (a gone knowledge base, an entry without `kb_id`) are counted, and a move
    that would leave them refuses unless the operator gives their number."""
    spaced.batch_index(space, DOCS)
    spaced.client.index(index=space.name, id="nokb", body={"id": "nokb", "content": "zorblax"}, refresh=True)

    with pytest.raises(MoveRefused, match="no tenant found"):
        move_to_tenant_scope(spaced.client, space.name, lambda kb_ids: {})
    assert not _blocked(spaced, space.name) and not plan_move(spaced.client, space.name, owners).moved

    assert plan_move(spaced.client, space.name, owners).orphans == 2  # g1 (kb-gone) and nokb
    with pytest.raises(MoveRefused, match="2 entries of no knowledge base"):
        move_to_tenant_scope(spaced.client, space.name, owners, orphans=1)
    assert not _blocked(spaced, space.name)
    assert move_to_tenant_scope(spaced.client, space.name, owners, orphans=2).moved


def test_the_move_reads_the_rebuilds_meta_and_the_adapters_batch() -> None:
    """F6: one reading of an index's `_meta` (the rebuild's), one `terms` batch size (the adapter's), one
    name for the moved mark (`opensearch_names`)."""
    from chalicelib.adapters.index import opensearch, opensearch_names, opensearch_rebuild

    assert sm.KB_BATCH == opensearch.TERMS_BATCH
    assert sm.index_meta is opensearch_rebuild.index_meta and not hasattr(sm, "_meta")
    assert sm.MOVED_META_KEY is opensearch_names.MOVED_META_KEY is opensearch_rebuild.MOVED_META_KEY
