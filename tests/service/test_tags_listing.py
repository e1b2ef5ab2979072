"""Listing and tags on the fakes: the cursor walks every row once under every filter, a page reads a bounded
number of rows, stale relations are dropped, and the by-name helpers a move or clone uses."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, ListKnowledgeQuery
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest, Conflict
from chalicelib.domain.types import Knowledge, KnowledgeBase, KnowledgeType, ParseStatus

START = datetime(2026, 2, 1, tzinfo=UTC)
KINDS = [KnowledgeType.FILE, KnowledgeType.URL, KnowledgeType.MANUAL, KnowledgeType.FILE_URL]
STATUSES = [ParseStatus.COMPLETED, ParseStatus.FAILED, ParseStatus.DRAFT]


class CountingRepo:
    """Counts the rows (and relations) a listing reads from the repositories."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def page_by_kb(self, *args: Any, **kwargs: Any) -> list[Knowledge]:
        rows: list[Knowledge] = self.inner.page_by_kb(*args, **kwargs)
        self.read += len(rows)
        return rows

    def tagged(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        keys: list[tuple[str, str]] = self.inner.tagged(*args, **kwargs)
        self.read += len(keys)
        return keys


def _seed(deps: Services, kb: KnowledgeBase, n: int, tag_id: str) -> list[Knowledge]:
    from chalicelib.services.tagging import relate_new

    rows = []
    for i in range(n):
        k = Knowledge(
            id=f"k{i:04d}",
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            type=KINDS[i % 4],
            title=f"{'Harbour' if i % 5 == 0 else 'Field'} note {i}",
            file_type="pdf" if i % 3 == 0 else "md",
            parse_status=STATUSES[i % 3],
            tag_ids=[tag_id] if i % 7 == 0 else [],
            created_at=START + timedelta(seconds=i),
        )
        relate_new(deps, k)
        deps.knowledge.insert(k)
        rows.append(k)
    return rows


def _walk(deps: Services, kb: KnowledgeBase, **filters: Any) -> list[str]:
    from chalicelib.operations.listing import list_knowledge

    ids: list[str] = []
    cursor = None
    for _ in range(1000):
        query = ListKnowledgeQuery.model_validate({**filters, "cursor": cursor})
        page = list_knowledge(deps, kb.tenant_id, kb.id, query)
        ids += [k["id"] for k in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids
    raise AssertionError("no end")


@pytest.fixture
def tagged_kb(
    deps: Services, kb: KnowledgeBase, request: pytest.FixtureRequest
) -> tuple[KnowledgeBase, str, list[Knowledge]]:
    from chalicelib.operations.tags import create_tag

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="harbour"))
    return kb, tag.id, _seed(deps, kb, getattr(request, "param", 300), tag.id)


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"source": "url"},
        {"file_type": "pdf"},
        {"file_type": "pdf", "source": "manual"},
        {"parse_status": "failed"},
        {"keyword": "harbour"},
        {"tag": True},
        {"tag": True, "parse_status": "completed", "source": "file"},
        {
            "created_from": to_iso(START + timedelta(seconds=100)),
            "created_to": to_iso(START + timedelta(seconds=900)),
        },
        {"tag": True, "created_from": to_iso(START + timedelta(seconds=100))},
    ],
)
@pytest.mark.parametrize("page_size", [1, 7, 100])
def test_the_cursor_walks_exactly_the_matching_rows_newest_first(
    deps: Services,
    tagged_kb: tuple[KnowledgeBase, str, list[Knowledge]],
    filters: dict[str, Any],
    page_size: int,
) -> None:
    from chalicelib.domain.listing import listing_source

    kb, tag_id, rows = tagged_kb
    filters = dict(filters)
    if filters.pop("tag", False):
        filters["tag_id"] = tag_id
    if page_size == 1 and not filters.get("tag_id"):
        pytest.skip("a request per row: covered by the larger pages")

    def wanted(k: Knowledge) -> bool:
        created = to_iso(k.created_at)
        return (
            ("source" not in filters or listing_source(k.type) == filters["source"])
            and ("file_type" not in filters or k.file_type == filters["file_type"])
            and ("parse_status" not in filters or k.parse_status.value == filters["parse_status"])
            and ("keyword" not in filters or filters["keyword"] in k.title.casefold())
            and ("tag_id" not in filters or filters["tag_id"] in k.tag_ids)
            and ("created_from" not in filters or created >= filters["created_from"])
            and ("created_to" not in filters or created <= filters["created_to"])
        )

    expected = [k.id for k in reversed(rows) if wanted(k)]
    assert expected  # every case matches something
    assert _walk(deps, kb, page_size=page_size, **filters) == expected


@pytest.mark.parametrize("tagged_kb", [1200], indirect=True)
def test_a_page_reads_a_bounded_number_of_rows(
    deps: Services, tagged_kb: tuple[KnowledgeBase, str, list[Knowledge]]
) -> None:
    from chalicelib.operations.listing import MAX_READ, page

    kb, tag_id, rows = tagged_kb
    counting = CountingRepo(deps.knowledge)
    tags = CountingRepo(deps.tags)
    deps.knowledge, deps.tags = counting, tags  # type: ignore[assignment]
    page(deps, kb.id, ListKnowledgeQuery(page_size=20))
    assert counting.read == 21
    counting.read = 0
    page(deps, kb.id, ListKnowledgeQuery(page_size=20, source="manual"))
    assert counting.read == 21  # the source index: no other row is read
    counting.read = 0
    listed = page(deps, kb.id, ListKnowledgeQuery(page_size=20, keyword="no such words"))
    assert counting.read == MAX_READ and listed.items == [] and listed.next_cursor is not None
    listed = page(deps, kb.id, ListKnowledgeQuery(page_size=5, tag_id=tag_id))
    assert tags.read == 6 and len(listed.items) == 5
    # a page cut short by the budget goes on from where it stopped: nothing skipped, nothing twice
    harbour = [k.id for k in reversed(rows) if k.title.startswith("Harbour")]
    assert _walk(deps, kb, keyword="harbour", page_size=100) == harbour
    assert _walk(deps, kb, keyword="no such words", page_size=100) == []


def test_a_stale_relation_is_dropped_and_a_deleted_row_is_skipped(
    deps: Services, tagged_kb: tuple[KnowledgeBase, str, list[Knowledge]]
) -> None:
    kb, tag_id, rows = tagged_kb
    newest_tagged = [k for k in reversed(rows) if tag_id in k.tag_ids]
    deps.knowledge.update_fields(newest_tagged[0].id, {"tag_ids": []})  # the relation is left behind
    deps.knowledge.delete(newest_tagged[1].id)  # the row is gone, the relation not yet
    assert _walk(deps, kb, tag_id=tag_id, page_size=3) == [k.id for k in newest_tagged[2:]]


def test_a_cursor_is_bound_to_its_filters_and_legacy_pages_still_work(
    deps: Services, tagged_kb: tuple[KnowledgeBase, str, list[Knowledge]]
) -> None:
    from chalicelib.operations.listing import list_knowledge

    kb, _, rows = tagged_kb
    first = list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page_size=10))
    with pytest.raises(BadRequest) as raised:
        list_knowledge(
            deps,
            kb.tenant_id,
            kb.id,
            ListKnowledgeQuery(page_size=10, source="url", cursor=first["next_cursor"]),
        )
    assert raised.value.code == "invalid_cursor"
    third = list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page=3, page_size=10))
    assert [k["id"] for k in third["items"]] == [k.id for k in reversed(rows)][20:30]
    # a different page size may go on from a cursor
    more = list_knowledge(
        deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page_size=5, cursor=first["next_cursor"])
    )
    assert [k["id"] for k in more["items"]] == [k.id for k in reversed(rows)][10:15]


def test_tags_by_name_carry_across_knowledge_bases(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.tags import create_tag
    from chalicelib.services.tag_names import tag_by_names, tag_names
    from chalicelib.services.tagging import set_tags

    red = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    blue = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="blue"))
    source = Knowledge(id=str(uuid.uuid4()), tenant_id=kb.tenant_id, kb_id=kb.id, type=KnowledgeType.FILE)
    deps.knowledge.insert(source)
    source = set_tags(deps, source, [blue.id, red.id])
    assert tag_names(deps, source) == ["blue", "Red"]

    from chalicelib.commands import CreateKnowledgeBase

    target_kb = create_kb(deps, kb.tenant_id, CreateKnowledgeBase(name=f"target-{uuid.uuid4().hex[:6]}"))
    existing = create_tag(deps, kb.tenant_id, target_kb.id, CreateTagRequest(name="RED"))
    copy = replace(source, id=str(uuid.uuid4()), kb_id=target_kb.id, tag_ids=[])
    deps.knowledge.insert(copy)
    tag_by_names(deps, copy, tag_names(deps, source))
    tag_by_names(deps, copy, ["blue"])  # idempotent
    moved = deps.knowledge.get(copy.id)
    assert moved is not None
    target_tags = {t.id: t.name for t in deps.tags.list_kb(target_kb.id)}
    assert sorted(target_tags.values()) == ["RED", "blue"] and existing.id in moved.tag_ids
    assert [target_tags[t] for t in moved.tag_ids] == ["blue", "RED"]
    assert {k for _, k in deps.tags.tagged(target_kb.id, existing.id)} == {copy.id}


def test_names_are_unique_and_unknown_tag_ids_are_refused(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.tags import create_tag
    from chalicelib.services.tagging import check_tag_ids

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    with pytest.raises(Conflict) as conflict:
        create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="red"))
    assert conflict.value.code == "duplicate_tag_name"
    assert check_tag_ids(deps, kb.id, [tag.id, tag.id]) == [tag.id]
    with pytest.raises(BadRequest) as refused:
        check_tag_ids(deps, kb.id, [tag.id, "nope"])
    assert refused.value.code == "unknown_tag_id"
    assert check_tag_ids(deps, kb.id, [tag.id, "nope"], strict=False) == [tag.id]


def test_many_tag_ids_are_checked_against_the_list_and_a_refused_edit_changes_nothing(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.commands import EditKnowledgeRequest
    from chalicelib.operations.knowledge_changes import edit
    from chalicelib.operations.tags import create_tag, delete_tag
    from chalicelib.services.tagging import check_tag_ids, set_tags

    ids = [create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name=f"t{i}")).id for i in range(8)]
    assert check_tag_ids(deps, kb.id, ids) == ids
    delete_tag(deps, kb.tenant_id, kb.id, ids[7])  # marked deleting at once: no longer assignable
    with pytest.raises(BadRequest):
        check_tag_ids(deps, kb.id, ids)
    with pytest.raises(BadRequest):
        check_tag_ids(deps, kb.id, [ids[7]])

    row = Knowledge(id=str(uuid.uuid4()), tenant_id=kb.tenant_id, kb_id=kb.id, type=KnowledgeType.FILE)
    deps.knowledge.insert(row)
    row = set_tags(deps, row, ids[:2])
    with pytest.raises(BadRequest) as refused:  # a file's text is not editable: the tags stay as they were
        edit(deps, kb.tenant_id, row.id, EditKnowledgeRequest(tag_ids=[ids[3]], content="new text"))
    assert refused.value.code == "not_manual"
    after = deps.knowledge.get(row.id)
    assert after is not None and after.tag_ids == ids[:2]
    assert [k for _, k in deps.tags.tagged(kb.id, ids[3])] == []


@pytest.mark.parametrize("tagged_kb", [3], indirect=True)
def test_a_tag_being_deleted_filters_nothing(
    deps: Services, tagged_kb: tuple[KnowledgeBase, str, list[Knowledge]]
) -> None:
    """The tag "disappears at once": before its task has taken it off the documents, a listing or a search
    by it is 400 unknown_tag_id (both had still answered its documents)."""
    from chalicelib.commands import SearchRequest
    from chalicelib.operations.listing import list_knowledge
    from chalicelib.operations.search import resolve_knowledge_ids
    from chalicelib.operations.tags import delete_tag

    kb, tag_id, rows = tagged_kb
    request = SearchRequest(query_text="harbour", tag_ids=[tag_id])
    assert resolve_knowledge_ids(deps, kb, request)  # its documents, while the tag lives
    delete_tag(deps, kb.tenant_id, kb.id, tag_id)  # its task has not run yet
    with pytest.raises(BadRequest) as refused:
        list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery(tag_id=tag_id))
    assert refused.value.code == "unknown_tag_id"
    with pytest.raises(BadRequest) as refused:
        resolve_knowledge_ids(deps, kb, request)
    assert refused.value.code == "unknown_tag_id"
    assert rows


def test_a_reversed_time_range_is_a_bad_request(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.listing import list_knowledge

    query = ListKnowledgeQuery(created_from=START + timedelta(days=1), created_to=START)
    with pytest.raises(BadRequest) as refused:
        list_knowledge(deps, kb.tenant_id, kb.id, query)
    assert refused.value.code == "invalid_query"
