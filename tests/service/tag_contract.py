"""The tag port's contract and the knowledge listing primitives (page_by_kb, get_many), run on the in-memory
fakes (tests/service) and on DynamoDB on moto (tests/e2e) by the same assertions."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.domain.clock import to_iso
from chalicelib.domain.tags import Tag, TagCapReached, TagNameTaken
from chalicelib.domain.types import KnowledgeType
from chalicelib.ports import TagRepo

from .repo_contract import Repos, row

START = datetime(2026, 3, 1, tzinfo=UTC)


def _tags(repos: Repos) -> TagRepo:
    assert repos.tags is not None
    return repos.tags


def new_tag(kb_id: str, name: str) -> Tag:
    return Tag(id=str(uuid.uuid4()), tenant_id="t1", kb_id=kb_id, name=name)


def kb() -> str:
    return f"kb-{uuid.uuid4().hex}"


class TagContract:
    # ------------------------------------------------------------ tags

    def test_tags_are_created_listed_by_name_and_read_back(self, repos: Repos) -> None:
        tags, kb_id = _tags(repos), kb()
        beta, alpha = new_tag(kb_id, "beta"), replace(new_tag(kb_id, "Alpha"), color="#f00")
        tags.create(beta, 10)
        tags.create(alpha, 10)
        assert [t.name for t in tags.list_kb(kb_id)] == ["Alpha", "beta"]
        read = tags.get(kb_id, alpha.id)
        assert read is not None and (read.name, read.color, read.tenant_id) == ("Alpha", "#f00", "t1")
        assert tags.get(kb(), alpha.id) is None  # another knowledge base's id is not this one's
        assert tags.list_kb(kb()) == []

    def test_names_are_unique_per_knowledge_base_whatever_the_case(self, repos: Repos) -> None:
        tags, kb_id = _tags(repos), kb()
        first = new_tag(kb_id, "Finance")
        tags.create(first, 10)
        with pytest.raises(TagNameTaken) as raised:
            tags.create(new_tag(kb_id, "  finance "), 10)
        assert raised.value.existing_id == first.id
        tags.create(new_tag(kb(), "Finance"), 10)  # another knowledge base may use it
        assert [t.id for t in tags.list_kb(kb_id)] == [first.id]

    def test_the_cap_holds_under_concurrent_creates(self, repos: Repos) -> None:
        tags, kb_id = _tags(repos), kb()
        outcomes: list[str] = []

        def create(n: int) -> None:
            try:
                tags.create(new_tag(kb_id, f"tag {n}"), 3)
                outcomes.append("made")
            except TagCapReached:
                outcomes.append("capped")

        threads = [threading.Thread(target=create, args=(n,)) for n in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["capped", "capped", "made", "made", "made"]
        assert len(tags.list_kb(kb_id)) == 3

    def test_rename_keeps_names_unique_and_frees_the_old_name(self, repos: Repos) -> None:
        tags, kb_id = _tags(repos), kb()
        a, b = new_tag(kb_id, "a"), new_tag(kb_id, "b")
        tags.create(a, 10)
        tags.create(b, 10)
        with pytest.raises(TagNameTaken):
            tags.update(kb_id, b.id, name="A")
        renamed = tags.update(kb_id, a.id, name="c", color="blue")
        assert renamed is not None and (renamed.name, renamed.color) == ("c", "blue")
        tags.update(kb_id, b.id, name="a")  # "a" is free again
        assert [t.name for t in tags.list_kb(kb_id)] == ["a", "c"]
        same = tags.update(kb_id, a.id, name="C")  # a change of case is the same name
        assert same is not None and same.name == "C"
        assert tags.update(kb_id, str(uuid.uuid4()), name="x") is None

    def test_delete_frees_the_name_and_a_slot(self, repos: Repos) -> None:
        tags, kb_id = _tags(repos), kb()
        a = new_tag(kb_id, "a")
        tags.create(a, 1)
        with pytest.raises(TagCapReached):
            tags.create(new_tag(kb_id, "b"), 1)
        assert tags.delete(kb_id, a.id) is True
        assert tags.delete(kb_id, a.id) is False
        tags.create(new_tag(kb_id, "a"), 1)
        assert [t.name for t in tags.list_kb(kb_id)] == ["a"]

    # ------------------------------------------------------------ relations

    def test_relations_page_newest_first_within_a_time_range(self, repos: Repos) -> None:
        tags, kb_id, tag_id = _tags(repos), kb(), str(uuid.uuid4())
        keys = [(to_iso(START + timedelta(minutes=i)), str(uuid.uuid4())) for i in range(5)]
        for created, knowledge_id in keys:
            tags.relate(kb_id, knowledge_id, created, [tag_id, "other"])
        tags.relate(kb_id, keys[0][1], keys[0][0], [tag_id])  # idempotent
        newest = list(reversed(keys))
        assert tags.tagged(kb_id, tag_id, limit=2) == newest[:2]
        assert tags.tagged(kb_id, tag_id, after=newest[1], limit=10) == newest[2:]
        assert tags.tagged(kb_id, tag_id, created_from=keys[1][0], created_to=keys[3][0], limit=10) == [
            keys[3],
            keys[2],
            keys[1],
        ]
        tags.unrelate(kb_id, keys[4][1], keys[4][0], [tag_id])
        assert tags.tagged(kb_id, tag_id, limit=1) == [keys[3]]
        assert tags.remove_knowledge(keys[3][1]) == 2  # both of its relations
        assert tags.tagged(kb_id, tag_id, limit=1) == [keys[2]]
        assert tags.tagged(kb_id, "other", limit=1) == [keys[4]]

    def test_an_id_that_extends_a_tags_id_with_a_key_part_finds_no_relation(self, repos: Repos) -> None:
        """`<tag id>#<created_at>` (a forged search filter, refused at the API too) once crashed the reader."""
        tags, kb_id, tag_id = _tags(repos), kb(), str(uuid.uuid4())
        created = to_iso(START)
        tags.relate(kb_id, str(uuid.uuid4()), created, [tag_id])
        assert tags.tagged(kb_id, f"{tag_id}#{created}", limit=10) == []

    def test_delete_kb_removes_its_tags_and_relations(self, repos: Repos) -> None:
        tags, kb_id, other = _tags(repos), kb(), kb()
        tag = new_tag(kb_id, "a")
        tags.create(tag, 10)
        tags.create(new_tag(other, "a"), 10)
        tags.relate(kb_id, "k1", to_iso(START), [tag.id])
        assert tags.delete_kb(kb_id) >= 2
        assert tags.list_kb(kb_id) == [] and tags.tagged(kb_id, tag.id) == []
        assert len(tags.list_kb(other)) == 1
        tags.create(new_tag(kb_id, "a"), 1)  # the name and the count went with it

    # ------------------------------------------------------------ listing primitives

    def test_page_by_kb_reads_newest_first_by_index_and_time(self, repos: Repos) -> None:
        kb_id = kb()
        kinds = [
            (KnowledgeType.FILE, "pdf"),
            (KnowledgeType.URL, "html"),
            (KnowledgeType.FILE_URL, "pdf"),
            (KnowledgeType.MANUAL, "md"),
            (KnowledgeType.FILE, "md"),
        ]
        made = [
            row(kb_id=kb_id, type=kind, file_type=ft, created_at=START + timedelta(minutes=i))
            for i, (kind, ft) in enumerate(kinds)
        ]
        for k in made:
            repos.knowledge.insert(k)
        ids = [k.id for k in reversed(made)]
        first = repos.knowledge.page_by_kb(kb_id, limit=2)
        assert [k.id for k in first] == ids[:2]
        after = (to_iso(first[-1].created_at), first[-1].id)
        assert [k.id for k in repos.knowledge.page_by_kb(kb_id, after=after, limit=10)] == ids[2:]
        by_url = repos.knowledge.page_by_kb(kb_id, index=("source", "url"), limit=10)
        assert [k.id for k in by_url] == [made[2].id, made[1].id]
        pdf = repos.knowledge.page_by_kb(kb_id, index=("file_type", "pdf"), limit=10)
        assert [k.id for k in pdf] == [made[2].id, made[0].id]
        ranged = repos.knowledge.page_by_kb(
            kb_id,
            created_from=to_iso(made[1].created_at),
            created_to=to_iso(made[3].created_at),
            limit=10,
        )
        assert [k.id for k in ranged] == [made[3].id, made[2].id, made[1].id]
        manual = repos.knowledge.page_by_kb(kb_id, index=("source", "manual"), limit=10)
        assert [k.id for k in manual] == [made[3].id]
        got = repos.knowledge.get_many([made[0].id, "missing", made[4].id])
        assert set(got) == {made[0].id, made[4].id} and got[made[0].id].file_type == "pdf"
