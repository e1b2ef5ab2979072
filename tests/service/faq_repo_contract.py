"""The FaqRepo contract, run on the in-memory fake (tests/service) and on DynamoDB through moto
(tests/e2e), so the service tests' fake cannot drift from the faq table. Each test uses fresh ids."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from chalicelib.domain.faq import FaqEntry
from chalicelib.ports import FaqRepo
from chalicelib.ports.faq import EntryWriteRefused


def make_entry(kb_id: str, question: str, entry_id: str = "") -> FaqEntry:
    return FaqEntry(
        id=entry_id or str(uuid.uuid4()),
        kb_id=kb_id,
        tenant_id="t",
        standard_question=question,
        answers=[f"answer to {question}"],
        similar_questions=[f"{question}?"],
        tags=["x"],
    ).rehash()


class FaqRepoContract:
    @pytest.fixture
    def faq(self) -> FaqRepo:
        raise NotImplementedError

    @pytest.fixture
    def kb_id(self) -> str:
        return f"kb-{uuid.uuid4()}"

    def test_entries_round_trip_and_stay_in_their_knowledge_base(self, faq: FaqRepo, kb_id: str) -> None:
        first, second = make_entry(kb_id, "one"), make_entry(kb_id, "two")
        faq.put_entries([first, second])
        got = faq.get_entry(kb_id, first.id)
        assert got is not None and got.to_body() == first.to_body()
        assert faq.get_entry(f"{kb_id}-other", first.id) is None
        assert set(faq.get_entries(kb_id, [first.id, second.id, "missing"])) == {first.id, second.id}
        first.indexed = True
        faq.put_entries([first])
        again = faq.get_entry(kb_id, first.id)
        assert again is not None and again.indexed is True
        faq.delete_entries(kb_id, [first.id, "missing"])
        assert faq.get_entry(kb_id, first.id) is None and faq.get_entry(kb_id, second.id) is not None

    def test_a_delete_returns_the_rows_it_removed_and_only_those(self, faq: FaqRepo, kb_id: str) -> None:
        """What a row counted on the storage quota is given back by the one delete that removed it."""
        first, second = make_entry(kb_id, "one"), make_entry(kb_id, "two")
        first.counted_bytes = 42
        faq.put_entries([first, second])
        removed = faq.delete_entries(kb_id, [first.id, "missing", first.id])
        assert [e.to_body() for e in removed] == [first.to_body()]
        assert faq.delete_entries(kb_id, [first.id]) == []  # a second delete of it removes nothing
        assert [e.id for e in faq.delete_entries(kb_id, [second.id])] == [second.id]

    def test_pages_go_in_id_order_and_end_with_an_empty_cursor(self, faq: FaqRepo, kb_id: str) -> None:
        entries = [make_entry(kb_id, f"q{i}") for i in range(7)]
        faq.put_entries(entries)
        faq.add_tags(kb_id, ["not-an-entry"])
        faq.put_last_import(kb_id, {"task_id": "t"})
        assert faq.acquire_lease(kb_id, "owner", 1000.0, 60) is None
        assert faq.claim_questions(kb_id, entries[0].id, ["k1", "k2"], 1000.0, 60) == {}
        seen, after, pages = [], "", 0
        while True:
            page, after = faq.page_entries(kb_id, after, 3)
            seen += [e.id for e in page]
            pages += 1
            if not after:
                break
        assert seen == sorted(e.id for e in entries) and pages == 3

    def test_the_lease_is_conditional_expires_and_is_released_only_by_its_owner(
        self, faq: FaqRepo, kb_id: str
    ) -> None:
        assert faq.get_lease(kb_id) is None
        assert faq.acquire_lease(kb_id, "a", 1000.0, 60) is None
        held = faq.acquire_lease(kb_id, "b", 1030.0, 60)
        assert held is not None and held.owner == "a" and held.expires_at == 1060.0
        assert faq.acquire_lease(kb_id, "a", 1030.0, 60) is None  # its owner renews it
        assert faq.release_lease(kb_id, "b") is False
        assert faq.acquire_lease(kb_id, "b", 1091.0, 60) is None  # a's lease expired at 1090
        assert faq.release_lease(kb_id, "a") is False  # a late release by the old owner does nothing
        lease = faq.get_lease(kb_id)
        assert lease is not None and lease.owner == "b"
        assert faq.release_lease(kb_id, "b") is True and faq.get_lease(kb_id) is None

    def test_tags_and_the_last_import(self, faq: FaqRepo, kb_id: str) -> None:
        faq.add_tags(kb_id, ["b", "a", "b"])
        faq.remove_tags(kb_id, ["b", "never"])
        assert faq.tags(kb_id) == ["a"]
        assert faq.get_last_import(kb_id) is None
        faq.put_last_import(kb_id, {"task_id": "t1", "failed": 2})
        faq.put_last_import(kb_id, {"task_id": "t2", "failed": 0})
        assert faq.get_last_import(kb_id) == {"task_id": "t2", "failed": 0}

    def test_a_page_after_every_entry_id_is_empty(self, faq: FaqRepo, kb_id: str) -> None:
        faq.put_entries([make_entry(kb_id, "one")])
        faq.add_tags(kb_id, ["x"])
        for after in ("~x", "~", "\u00e9", "zzz", "\U0001f600"):
            assert faq.page_entries(kb_id, after, 10) == ([], "")

    def test_put_entry_writes_only_a_new_row_or_the_row_as_read(self, faq: FaqRepo, kb_id: str) -> None:
        entry = make_entry(kb_id, "one")
        faq.put_entry(entry, None)
        with pytest.raises(EntryWriteRefused) as exists:
            faq.put_entry(entry, None)
        assert exists.value.gone is False
        read = faq.get_entry(kb_id, entry.id)
        assert read is not None
        first = FaqEntry.from_body(read.to_body())
        first.answers, first.updated_at = ["first"], read.updated_at + timedelta(milliseconds=1)
        faq.put_entry(first, read)
        second = FaqEntry.from_body(read.to_body())
        second.answers, second.updated_at = ["second"], read.updated_at + timedelta(milliseconds=2)
        with pytest.raises(EntryWriteRefused) as changed:
            faq.put_entry(second, read)  # read before `first` was written
        assert changed.value.gone is False
        stored = faq.get_entry(kb_id, entry.id)
        assert stored is not None and stored.answers == ["first"]
        faq.delete_entries(kb_id, [entry.id])
        with pytest.raises(EntryWriteRefused) as gone:
            faq.put_entry(second, first)
        assert gone.value.gone is True and faq.get_entry(kb_id, entry.id) is None

    def test_question_claims_are_exclusive_pending_until_confirmed_and_taken_over_only_as_read(
        self, faq: FaqRepo, kb_id: str
    ) -> None:
        assert faq.claim_questions(kb_id, "a", ["k1", "k2"], 1000.0, 60) == {}
        refused = faq.claim_questions(kb_id, "b", ["k2", "k3"], 1010.0, 60)
        assert list(refused) == ["k2"] and refused["k2"].entry_id == "a"
        assert refused["k2"].expires_at == 1060.0
        assert faq.claim_questions(kb_id, "a", ["k1"], 1020.0, 60) == {}  # its own again
        assert faq.claim_questions(kb_id, "b", ["k2"], 1100.0, 60) == {}  # a's pending claim expired
        faq.confirm_questions(kb_id, "a", ["k1", "k2"])  # k2 is b's now: left alone
        holders = faq.question_holders(kb_id, ["k1", "k2", "k3", "k4"])
        assert {k: (h.entry_id, h.expires_at) for k, h in holders.items()} == {
            "k1": ("a", None),
            "k2": ("b", 1160.0),
            "k3": ("b", 1070.0),
        }
        held = holders["k1"]
        assert list(faq.claim_questions(kb_id, "c", ["k1"], 99999.0, 60)) == ["k1"]  # held for good
        faq.confirm_questions(kb_id, "a", ["k1"])  # written again: the holder read before is stale
        assert list(faq.claim_questions(kb_id, "c", ["k1"], 2000.0, 60, {"k1": held})) == ["k1"]
        current = faq.question_holders(kb_id, ["k1"])["k1"]
        assert faq.claim_questions(kb_id, "c", ["k1"], 2000.0, 60, {"k1": current}) == {}
        faq.release_questions(kb_id, "a", ["k1", "k2"])  # neither is a's any more
        assert {k: h.entry_id for k, h in faq.question_holders(kb_id, ["k1", "k2"]).items()} == {
            "k1": "c",
            "k2": "b",
        }
        faq.release_questions(kb_id, "b", ["k2"])
        assert set(faq.question_holders(kb_id, ["k1", "k2", "k3"])) == {"k1", "k3"}
        faq.clear_questions(kb_id)
        assert faq.question_holders(kb_id, ["k1", "k3"]) == {}

    def test_the_keyed_mark_and_tag_links_and_their_clearing(self, faq: FaqRepo, kb_id: str) -> None:
        assert faq.entries_keyed(kb_id, 1) is False
        faq.mark_entries_keyed(kb_id, 1)
        assert faq.entries_keyed(kb_id, 1) is True
        assert faq.entries_keyed(kb_id, 2) is False  # a mark vouches for its key rule only
        faq.mark_entries_keyed(kb_id, 2)
        assert faq.entries_keyed(kb_id, 2) is True
        faq.link_tags(kb_id, [("e1", "a"), ("e2", "a"), ("e1", "a#b"), ("e3", "b"), ("e1", "a")])
        assert sorted(faq.tag_users(kb_id, "a", 10)) == ["e1", "e2"]
        assert faq.tag_users(kb_id, "a#b", 10) == ["e1"]
        assert len(faq.tag_users(kb_id, "a", 1)) == 1
        assert faq.tag_users(f"{kb_id}-other", "a", 10) == []
        faq.unlink_tags(kb_id, [("e1", "a"), ("e9", "a")])
        assert faq.tag_users(kb_id, "a", 10) == ["e2"]
        faq.clear_questions(kb_id)
        assert faq.entries_keyed(kb_id, 1) is False and faq.entries_keyed(kb_id, 2) is False
        assert faq.tag_users(kb_id, "a", 10) == [] and faq.tag_users(kb_id, "b", 10) == []
