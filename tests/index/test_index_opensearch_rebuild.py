"""The operator's rebuild (`opensearch_rebuild`) on osmem: a legacy index is copied from its own `_source` into
`versioned_name(name)` behind an alias `name`, atomically; a re-run is a no-op or converges after a crash; a
difference in counts refuses and leaves the old index serving, writable; writes during the copy are refused as
busy. osmem rejects `knn` queries, so the vectors are compared as stored (`_source`), which is what a knn query
reads. The copy's task (osmem has no `_tasks`) is in test_index_opensearch_rebuild_tasks."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from index_contract import DIM, entry, ids, vec
from test_index_word_suffixes import _knowledge_found, _older_body

from chalicelib.adapters.index.opensearch import (
    ANALYSIS_VERSION,
    OpenSearchEngine,
    build_opensearch_client,
    index_body,
    versioned_name,
)
from chalicelib.adapters.index.opensearch_rebuild import (
    RebuildRefused,
    index_names,
    plan_rebuild,
    rebuild_index,
)
from chalicelib.ports import IndexSpace, IndexUnavailable

DOCS = [
    entry("lang-c", "Pointers in C are plain addresses", knowledge="c", vector=vec(1, 0, 0)),
    entry("lang-cpp", "Templates in C++ are expanded at compile time", knowledge="cpp", vector=vec(0, 1, 0)),
    entry("lang-cs", "Generics in C# are reified at run time", knowledge="cs", vector=vec(0, 0, 1)),
    entry("other", "Nothing about languages", knowledge="other", vector=vec(1, 1, 1)),
]


class Crash(Exception):
    pass


@pytest.fixture
def space() -> IndexSpace:
    return IndexSpace(model_id=f"test-rebuild-{uuid.uuid4().hex[:8]}", dimensions=DIM)


@pytest.fixture
def engine(osmem_url: str) -> Iterator[OpenSearchEngine]:
    yield OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)


def _legacy(engine: OpenSearchEngine, space: IndexSpace, meta: int | None) -> None:
    engine.client.indices.create(index=space.name, body=_older_body(space, meta))
    engine.batch_index(space, DOCS)


def _stored(engine: OpenSearchEngine, index: str) -> dict[str, dict[str, Any]]:
    hits = engine.client.search(index=index, body={"size": 100, "query": {"match_all": {}}})["hits"]["hits"]
    return {hit["_id"]: hit["_source"] for hit in hits}


def _concrete(engine: OpenSearchEngine, space: IndexSpace) -> dict[str, Any]:
    """Every concrete index of the space (the serving one and any leftover) -> its aliases."""
    found = engine.client.indices.get_alias(index=f"{space.name}*")
    return {index: sorted(info["aliases"]) for index, info in found.items()}


@pytest.mark.parametrize("meta", [2, None], ids=["analysis-2", "no-meta"])
def test_a_legacy_index_is_rebuilt_behind_its_alias(
    engine: OpenSearchEngine, space: IndexSpace, meta: int | None
) -> None:
    _legacy(engine, space, meta)
    assert _knowledge_found(engine, space, "C++") == {"c", "cpp", "cs"}  # the old analysis: all are `c`
    before = _stored(engine, space.name)

    result = rebuild_index(engine.client, space.name)

    target = versioned_name(space.name)
    assert (result.rebuilt, result.documents, result.plan.analysis) == (True, len(DOCS), meta)
    assert _concrete(engine, space) == {target: [space.name]}  # the legacy concrete index is gone
    mapping = engine.client.indices.get_mapping(index=space.name)[target]["mappings"]
    assert mapping["_meta"] == {"weknora_analysis": ANALYSIS_VERSION}
    assert mapping["properties"]["embedding"]["dimension"] == DIM
    assert _stored(engine, space.name) == before  # vectors, search_text and all, nothing re-embedded
    # the same engine (its index known ready) reads and writes the alias
    assert _knowledge_found(engine, space, "C++") == {"cpp"}
    assert _knowledge_found(engine, space, "C#") == {"cs"}
    assert _knowledge_found(engine, space, "C") == {"c"}
    engine.batch_index(
        space, [entry("lang-fs", "Pipelines in F# compose", knowledge="fs", vector=vec(1, 0, 1))]
    )
    assert _knowledge_found(engine, space, "F#") == {"fs"}
    assert engine.set_enabled(space, "kb1", ["lang-cs"], False) == 1
    assert _knowledge_found(engine, space, "C#") == set()
    assert engine.delete_by_ids(space, "kb1", ["lang-fs"]) == 1
    assert engine.delete_by_knowledge(space, "kb1", ["other"]) == 1
    assert engine.count(space, "kb1") == len(DOCS) - 1
    assert ids(engine.hybrid_search(space, "kb1", "templates", None, 5, vector=False)) == ["lang-cpp"]
    assert [e.id for e in engine.entries_of(space, "kb1", "cpp")] == ["lang-cpp"]

    again = rebuild_index(engine.client, space.name)  # a no-op
    assert (again.rebuilt, again.plan.up_to_date) == (False, True)
    assert _concrete(engine, space) == {target: [space.name]}

    engine.drop_index(space)  # the alias names the concrete index to delete
    assert _concrete(engine, space) == {}


def test_a_new_index_is_created_versioned_behind_its_alias(
    engine: OpenSearchEngine, space: IndexSpace
) -> None:
    engine.batch_index(space, DOCS)
    OpenSearchEngine(engine.client).ensure_index(space)  # another worker: finds it
    assert _concrete(engine, space) == {versioned_name(space.name): [space.name]}
    assert plan_rebuild(engine.client, space.name).up_to_date
    assert not rebuild_index(engine.client, space.name).rebuilt
    assert _knowledge_found(engine, space, "C++") == {"cpp"}


@pytest.mark.parametrize("crash_at", ["reindex", "update_aliases"])
def test_a_rerun_after_a_crash_converges(
    engine: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch, crash_at: str
) -> None:
    """Before the swap the legacy index still serves; the leftover copy is dropped and made again (a document
    only the leftover holds does not survive), so a complete or partial leftover converges alike."""
    _legacy(engine, space, 2)
    before = _stored(engine, space.name)
    target = versioned_name(space.name)

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash()

    owner = engine.client if crash_at == "reindex" else engine.client.indices
    with monkeypatch.context() as patched:
        patched.setattr(owner, crash_at, crash)
        with pytest.raises(Crash):
            rebuild_index(engine.client, space.name)
    assert _concrete(engine, space) == {space.name: [], target: []}  # no alias moved
    assert not _blocked(engine, space.name)  # the write block is lifted
    assert _knowledge_found(engine, space, "C++") == {"c", "cpp", "cs"}  # the old index serves on
    assert index_names(engine.client) == [space.name]  # the leftover is no name of its own
    engine.client.index(index=target, id="stray", body={"id": "stray", "kb_id": "kb1"}, refresh=True)
    assert (
        plan_rebuild(engine.client, space.name)
        .describe()
        .startswith(f"{space.name}: drop the leftover {target}")
    )

    result = rebuild_index(engine.client, space.name)

    assert (result.rebuilt, result.documents) == (True, len(DOCS))
    assert _concrete(engine, space) == {target: [space.name]}
    assert _stored(engine, space.name) == before
    assert _knowledge_found(engine, space, "C++") == {"cpp"}


def _blocked(engine: OpenSearchEngine, index: str) -> bool:
    settings = engine.client.indices.get_settings(index=index)[index]["settings"]["index"]
    return str(settings.get("blocks", {}).get("write", "false")) == "true"


def test_writes_during_the_copy_are_refused_as_busy_and_the_swapped_index_agrees(
    engine: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serving index is write-blocked while it is copied (the API writes it too: a chunk switch, an
    entry's upsert, a move): each write is the port's IndexUnavailable (a stage retries it, the API answers
    503), none is lost in the swap, and once swapped the index takes writes again. (A reviewer's case: a switch
    accepted during the copy was undone by the swap.)"""
    _legacy(engine, space, 2)
    reindex = engine.client.reindex
    refused: list[str] = []

    def copy_with_writes_meanwhile(*args: Any, **kwargs: Any) -> Any:
        answer = reindex(*args, **kwargs)  # osmem copies before it answers: these come after the copy read
        assert _blocked(engine, space.name)
        writes = {
            "switch": lambda: engine.set_enabled(space, "kb1", ["lang-cs"], False),
            "upsert": lambda: engine.batch_index(space, [entry("late", "A C++ note", knowledge="late")]),
            "move": lambda: engine.move_knowledge(space, "kb1", "kb2", ["other"]),
        }
        for what, write in writes.items():
            with pytest.raises(IndexUnavailable, match="rejected as busy"):
                write()
            refused.append(what)
        return answer

    monkeypatch.setattr(engine.client, "reindex", copy_with_writes_meanwhile)
    result = rebuild_index(engine.client, space.name)
    monkeypatch.undo()

    assert refused == ["switch", "upsert", "move"]
    assert (result.rebuilt, result.documents) == (True, len(DOCS))
    target = versioned_name(space.name)
    assert _concrete(engine, space) == {target: [space.name]} and not _blocked(engine, target)
    assert "lang-cs" in ids(engine.hybrid_search(space, "kb1", "Generics reified", None, 5, vector=False))
    # the retried switch now lands, and stays
    assert engine.set_enabled(space, "kb1", ["lang-cs"], False) == 1
    assert "lang-cs" not in ids(engine.hybrid_search(space, "kb1", "Generics reified", None, 5, vector=False))


def test_a_count_difference_refuses_and_the_old_index_serves_on_writable(
    engine: OpenSearchEngine, space: IndexSpace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy that comes up short (a document lost on the way): nothing is swapped, the copy is deleted, and the
    old index serves every document through `name`, its write block lifted."""
    _legacy(engine, space, None)
    reindex = engine.client.reindex

    def a_short_copy(*args: Any, **kwargs: Any) -> Any:
        answer = reindex(*args, **kwargs)
        engine.client.delete(index=versioned_name(space.name), id="other", refresh=True)
        return answer

    monkeypatch.setattr(engine.client, "reindex", a_short_copy)
    with pytest.raises(RebuildRefused, match=f"the copy holds {len(DOCS) - 1} documents, {space.name} 4;"):
        rebuild_index(engine.client, space.name)
    monkeypatch.undo()

    assert _concrete(engine, space) == {space.name: []}  # the copy is gone, the legacy index serves
    assert not _blocked(engine, space.name)
    engine.batch_index(space, [entry("late", "A C++ note written afterwards", knowledge="late")])
    assert engine.count(space, "kb1") == len(DOCS) + 1
    assert "late" in _knowledge_found(engine, space, "C++")
    assert rebuild_index(engine.client, space.name).documents == len(DOCS) + 1


def test_the_copy_keeps_the_vector_fields_engine_parameters_and_dimension(
    engine: OpenSearchEngine, space: IndexSpace
) -> None:
    body = _older_body(space, 2)
    body["mappings"]["properties"]["embedding"]["method"]["parameters"] = {"ef_construction": 64, "m": 8}
    engine.client.indices.create(index=space.name, body=body)
    engine.batch_index(space, DOCS[:1])
    rebuild_index(engine.client, space.name)
    target = versioned_name(space.name)
    vector = engine.client.indices.get_mapping(index=target)[target]["mappings"]["properties"]["embedding"]
    assert vector["dimension"] == DIM
    assert vector["method"]["parameters"] == {"ef_construction": 64, "m": 8}


def test_all_lists_aliases_and_legacy_indices_not_leftovers_nor_other_indices(
    engine: OpenSearchEngine,
) -> None:
    assert index_names(engine.client) == []  # a cluster without indices
    aliased, legacy = (
        IndexSpace(model_id=f"test-all-{n}-{uuid.uuid4().hex[:6]}", dimensions=DIM) for n in "ab"
    )
    engine.batch_index(aliased, DOCS[:1])
    _legacy(engine, legacy, None)
    engine.client.indices.create(index=versioned_name(legacy.name, 2), body=index_body(legacy))  # a leftover
    engine.client.indices.create(
        index="someone-elses", body={"mappings": {"properties": {"a": {"type": "text"}}}}
    )
    assert index_names(engine.client) == sorted([aliased.name, legacy.name])

    planned = [rebuild_index(engine.client, n, dry_run=True) for n in index_names(engine.client)]
    assert [(r.plan.name, r.plan.up_to_date, r.rebuilt) for r in planned] == sorted(
        [(aliased.name, True, False), (legacy.name, False, False)]
    )
    assert _concrete(engine, legacy) == {
        legacy.name: [],
        versioned_name(legacy.name, 2): [],
    }  # nothing changed

    assert [rebuild_index(engine.client, n).rebuilt for n in index_names(engine.client)] == [
        n == legacy.name for n in sorted([aliased.name, legacy.name])
    ]
    assert rebuild_index(engine.client, index_names(engine.client)[0]).rebuilt is False


def test_a_name_that_is_no_space_index_is_refused(engine: OpenSearchEngine, space: IndexSpace) -> None:
    with pytest.raises(RebuildRefused, match="no such index"):
        rebuild_index(engine.client, space.name)
    engine.ensure_index(space)
    with pytest.raises(RebuildRefused, match="behind the alias"):
        rebuild_index(engine.client, versioned_name(space.name))
    engine.client.indices.create(index="plain", body={"mappings": {"properties": {"a": {"type": "text"}}}})
    with pytest.raises(RebuildRefused, match="not an index of this adapter"):
        rebuild_index(engine.client, "plain")


def test_the_operator_script_dry_run_then_rebuild(
    engine: OpenSearchEngine, space: IndexSpace, osmem_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(__file__).resolve().parents[2] / "scripts" / "rebuild_opensearch_index.py"
    spec = importlib.util.spec_from_file_location("rebuild_opensearch_index", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    _legacy(engine, space, 2)

    assert script.main(["--all", "--dry-run", "--url", osmem_url]) == 0
    assert f"dry run: {space.name}: copy {space.name} (analysis 2" in capsys.readouterr().out
    assert _concrete(engine, space) == {space.name: []}

    assert script.main(["--index", space.name, "--url", osmem_url]) == 0
    assert (
        f"{space.name}: rebuilt as {versioned_name(space.name)} ({len(DOCS)} documents)"
        in capsys.readouterr().out
    )
    assert script.main(["--index", "weknora-missing-8", "--url", osmem_url]) == 1
    assert "refused: weknora-missing-8: no such index" in capsys.readouterr().err
