"""The state ports' contract, run against the in-memory fakes (tests/service) and the DynamoDB adapters on
moto (tests/e2e): the same assertions, so the fakes the service tests rely on cannot drift from the real
repositories.

A test module subclasses `RepoContract` and provides a `repos` fixture. The real tables may be shared by
every test of a module, so each test works on fresh ids and checks table-wide queries (in flight, stuck
summaries) by membership only.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.domain.clock import iso_before, to_iso
from chalicelib.domain.ids import api_key_hash, attempt_chunk_prefix, chunk_id, image_chunk_id
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    Span,
    SpanKind,
    SpanStatus,
    SummaryStatus,
    Tenant,
)
from chalicelib.ports import (
    ApiKeyRepo,
    ChunkRepo,
    DuplicateKnowledge,
    EmbeddingCache,
    IndexSpace,
    KnowledgeBaseRepo,
    KnowledgeRepo,
    ShareRepo,
    SpanRepo,
    StorageQuotaExceeded,
    TagRepo,
    TenantRepo,
)

IN_AN_HOUR = iso_before(-3600)  # a cutoff every row written now is older than


@dataclass
class Repos:
    knowledge: KnowledgeRepo
    chunks: ChunkRepo
    spans: SpanRepo
    tenants: TenantRepo
    kbs: KnowledgeBaseRepo
    cache: EmbeddingCache
    api_keys: ApiKeyRepo
    tags: TagRepo | None = None  # tests/service/tag_contract.py
    shares: ShareRepo | None = None


def new_id() -> str:
    return str(uuid.uuid4())


def row(**fields: object) -> Knowledge:
    base = Knowledge(
        id=new_id(),
        tenant_id="t1",
        kb_id=f"kb-{uuid.uuid4().hex[:8]}",
        type=KnowledgeType.FILE,
        title="notes.md",
        file_name="notes.md",
        file_type="md",
        file_size=10,
        metadata={"source": {"nested": [1, 2]}},
        process_overrides={"chunking": {"chunk_size": 256}},
        tag_ids=["a", "b"],
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def key() -> str:
    return f"t1|kb|file|md|{uuid.uuid4().hex}"


class RepoContract:
    # ------------------------------------------------------------ insert, read, dedupe

    def test_a_row_reads_back_as_written_and_reads_are_copies(self, repos: Repos) -> None:
        written = row(dedupe_key=key())
        repos.knowledge.insert(written)
        read = repos.knowledge.get(written.id)
        assert read is not None
        assert (
            read.to_dict()
            == replace(
                written,
                created_at=read.created_at,
                updated_at=read.updated_at,
            ).to_dict()
        )
        assert to_iso(read.created_at) == to_iso(written.created_at)  # kept to the millisecond
        read.metadata["changed"] = True
        read.parse_status = ParseStatus.FAILED
        again = repos.knowledge.get(written.id)
        assert again is not None and "changed" not in again.metadata
        assert again.parse_status == ParseStatus.PENDING
        assert repos.knowledge.get(new_id()) is None

    def test_a_rows_storage_backend_reads_back_and_stays_through_its_changes(self, repos: Repos) -> None:
        """A document knows its storage backend from its row (workers need no knowledge base read); a
        reparse, a field edit or a move never changes where its objects are."""
        k = row(dedupe_key=key(), storage_backend="tc-cos", file_path="storage://tc-cos/t1/k/source.md")
        repos.knowledge.insert(k)
        read = repos.knowledge.get(k.id)
        assert read is not None and (read.storage_backend, read.file_path) == (
            "tc-cos",
            "storage://tc-cos/t1/k/source.md",
        )
        assert read.to_dict()["storage_backend"] == "tc-cos" and "file_path" not in read.to_dict()
        repos.knowledge.update_fields(k.id, {"title": "renamed"})
        repos.knowledge.reset_for_reparse(k.id, None)
        again = repos.knowledge.get(k.id)
        assert again is not None and again.storage_backend == "tc-cos"
        plain = row(dedupe_key=key())
        repos.knowledge.insert(plain)
        stored = repos.knowledge.get(plain.id)
        assert stored is not None and stored.storage_backend == ""  # the default backend
        # a move to another backend switches the backend and the links in one write
        switched = repos.knowledge.update_fields(
            k.id, {"storage_backend": "", "file_path": "s3://files/t1/k/source.md"}
        )
        assert switched is not None and switched.storage_backend == ""
        assert switched.file_path == "s3://files/t1/k/source.md" and switched.title == "renamed"

    def test_an_update_expecting_what_it_read_is_refused_once_that_changed(self, repos: Repos) -> None:
        """`expect`: the fields are set only while the row still holds what the caller read, in the same
        conditional write. Of two edits that read the same text only one replaces it (the other learns it
        lost and removes its own object); a worker writes only for its own try (attempt, status)."""
        k = row(type=KnowledgeType.MANUAL, file_path="mem://files/t1/k/a.md", file_hash="h1", file_size=3)
        repos.knowledge.insert(k)
        read = {"file_path": k.file_path, "file_hash": "h1", "file_size": 3}
        texts = [{"file_path": f"mem://files/t1/k/{n}.md", "file_hash": n, "file_size": 5} for n in "bcdef"]
        with ThreadPoolExecutor(max_workers=5) as pool:
            outcomes = list(pool.map(lambda t: repos.knowledge.update_fields(k.id, t, expect=read), texts))
        winners = [o for o in outcomes if o is not None]
        assert len(winners) == 1
        stored = repos.knowledge.get(k.id)
        assert stored is not None
        assert (stored.file_path, stored.file_hash, stored.file_size) == (
            winners[0].file_path,
            winners[0].file_hash,
            5,
        )  # the three fields of one text, never a mix
        assert repos.knowledge.update_fields(k.id, {"title": "late"}, expect=read) is None
        assert (got := repos.knowledge.get(k.id)) is not None and got.title == "notes.md"

        assert repos.knowledge.update_fields(k.id, {"file_size": 9}, expect={"attempt": 2}) is None
        moved = {"attempt": 1, "parse_status": ParseStatus.PROCESSING.value}
        assert repos.knowledge.update_fields(k.id, {"file_size": 9}, expect=moved) is None
        mine = {"attempt": 1, "parse_status": ParseStatus.PENDING.value}
        sized = repos.knowledge.update_fields(k.id, {"file_size": 9}, expect=mine)
        assert sized is not None and sized.file_size == 9

        bare = row(type=KnowledgeType.URL, file_name="", file_type="html", file_size=0)
        repos.knowledge.insert(bare)  # nothing stored yet: empty values are expected as written
        first = repos.knowledge.update_fields(
            bare.id, {"file_size": 7}, expect={"file_size": 0, "file_path": ""}
        )
        assert first is not None and first.file_size == 7

        repos.knowledge.mark_deleting(k.id)  # a row being deleted changes no more, whatever is expected
        assert repos.knowledge.update_fields(k.id, {"title": "x"}, expect={"attempt": 1}) is None
        assert repos.knowledge.update_fields(new_id(), {"title": "x"}, expect={"attempt": 1}) is None

    def test_inserting_an_existing_id_fails_and_keeps_the_row(self, repos: Repos) -> None:
        first = row()
        repos.knowledge.insert(first)
        with pytest.raises(Exception):  # noqa: B017 - each adapter raises its own storage error
            repos.knowledge.insert(replace(first, title="other"))
        stored = repos.knowledge.get(first.id)
        assert stored is not None and stored.title == "notes.md"

    def test_a_live_holder_of_the_dedupe_key_refuses_the_second_row(self, repos: Repos) -> None:
        dedupe = key()
        first, second = row(dedupe_key=dedupe), row(dedupe_key=dedupe)
        repos.knowledge.insert(first)
        with pytest.raises(DuplicateKnowledge) as raised:
            repos.knowledge.insert(second)
        assert raised.value.existing.id == first.id
        assert repos.knowledge.get(second.id) is None  # nothing of the loser was written
        holder = repos.knowledge.find_duplicate(dedupe)
        assert holder is not None and holder.id == first.id
        assert repos.knowledge.find_duplicate(key()) is None

    @pytest.mark.parametrize(
        "holder_status",
        [ParseStatus.PENDING, ParseStatus.PROCESSING, ParseStatus.COMPLETED, ParseStatus.DRAFT],
    )
    def test_every_state_but_failed_holds_the_claim(self, repos: Repos, holder_status: ParseStatus) -> None:
        dedupe = key()
        repos.knowledge.insert(row(dedupe_key=dedupe, parse_status=holder_status))
        with pytest.raises(DuplicateKnowledge):
            repos.knowledge.insert(row(dedupe_key=dedupe))

    def test_a_failed_holder_is_taken_over(self, repos: Repos) -> None:
        dedupe = key()
        failed = row(dedupe_key=dedupe)
        repos.knowledge.insert(failed)
        assert repos.knowledge.mark_failed(failed.id, 1, "broken", "docreader_parse_failed")
        assert repos.knowledge.find_duplicate(dedupe) is None  # a failed row blocks nothing
        successor = row(dedupe_key=dedupe)
        repos.knowledge.insert(successor)
        holder = repos.knowledge.find_duplicate(dedupe)
        assert holder is not None and holder.id == successor.id
        kept = repos.knowledge.get(failed.id)
        assert kept is not None and kept.parse_status == ParseStatus.FAILED  # the old row stays
        with pytest.raises(DuplicateKnowledge):
            repos.knowledge.insert(row(dedupe_key=dedupe))

    def test_deleting_the_holder_frees_the_key_but_not_a_claim_taken_over(self, repos: Repos) -> None:
        dedupe = key()
        first = row(dedupe_key=dedupe)
        repos.knowledge.insert(first)
        repos.knowledge.delete(first.id)
        assert repos.knowledge.get(first.id) is None
        second = row(dedupe_key=dedupe)
        repos.knowledge.insert(second)  # the key is free again
        repos.knowledge.mark_failed(second.id, None, "x", "unknown")
        third = row(dedupe_key=dedupe)
        repos.knowledge.insert(third)
        repos.knowledge.delete(second.id)  # the old holder's delete leaves the new claim alone
        holder = repos.knowledge.find_duplicate(dedupe)
        assert holder is not None and holder.id == third.id
        repos.knowledge.delete(new_id())  # a missing row is not an error

    def test_racing_inserts_of_one_key_leave_one_winner(self, repos: Repos) -> None:
        dedupe = key()
        contenders = [row(dedupe_key=dedupe) for _ in range(4)]
        barrier = threading.Barrier(len(contenders))
        outcomes: list[str] = []

        def insert(k: Knowledge) -> None:
            barrier.wait()
            try:
                repos.knowledge.insert(k)
                outcomes.append("won")
            except DuplicateKnowledge:
                outcomes.append("duplicate")

        threads = [threading.Thread(target=insert, args=(k,)) for k in contenders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["duplicate", "duplicate", "duplicate", "won"]
        stored = [k for k in contenders if repos.knowledge.get(k.id) is not None]
        assert len(stored) == 1

    def test_page_by_kb_is_newest_first_and_goes_on_after_a_position(self, repos: Repos) -> None:
        kb_id = f"kb-{uuid.uuid4().hex}"
        start = datetime(2026, 1, 1, tzinfo=UTC)
        made = [row(kb_id=kb_id, created_at=start + timedelta(minutes=i)) for i in range(5)]
        for k in made:
            repos.knowledge.insert(k)
        first = repos.knowledge.page_by_kb(kb_id, limit=2)
        assert [k.id for k in first] == [made[4].id, made[3].id]
        rest = repos.knowledge.page_by_kb(kb_id, after=(to_iso(first[-1].created_at), first[-1].id), limit=10)
        assert [k.id for k in rest] == [made[2].id, made[1].id, made[0].id]
        assert repos.knowledge.page_by_kb(f"kb-{uuid.uuid4().hex}", limit=10) == []

    # ------------------------------------------------------------ transitions

    def test_begin_processing_only_from_pending_or_processing_of_the_same_attempt(self, repos: Repos) -> None:
        k = row(error_message="old", error_code="OLD")
        repos.knowledge.insert(k)
        assert repos.knowledge.begin_processing(k.id, 2) is None  # another attempt
        started = repos.knowledge.begin_processing(k.id, 1)
        assert started is not None and started.parse_status == ParseStatus.PROCESSING
        assert started.error_message == "" and started.error_code == ""
        assert repos.knowledge.begin_processing(k.id, 1) is not None  # a redelivery may restart it
        assert repos.knowledge.begin_processing(new_id(), 1) is None
        for status in (ParseStatus.DRAFT, ParseStatus.FINALIZING, ParseStatus.COMPLETED, ParseStatus.FAILED):
            other = row(parse_status=status)
            repos.knowledge.insert(other)
            assert repos.knowledge.begin_processing(other.id, 1) is None, status
            stored = repos.knowledge.get(other.id)
            assert stored is not None and stored.parse_status == status

    def test_mark_failed_only_in_flight_and_of_the_attempt_when_given(self, repos: Repos) -> None:
        k = row(pending_subtasks_count=2)
        repos.knowledge.insert(k)
        assert not repos.knowledge.mark_failed(k.id, 2, "late", "unknown")  # superseded
        assert repos.knowledge.mark_failed(k.id, 1, "x" * 3000, "task_timeout")
        failed = repos.knowledge.get(k.id)
        assert failed is not None and failed.parse_status == ParseStatus.FAILED
        assert failed.error_message == "x" * 2000 and failed.error_code == "task_timeout"
        assert failed.pending_subtasks_count == 0
        assert not repos.knowledge.mark_failed(k.id, None, "again", "unknown")  # terminal
        for status in (ParseStatus.DRAFT, ParseStatus.COMPLETED, ParseStatus.DELETING):
            other = row(parse_status=status)
            repos.knowledge.insert(other)
            assert not repos.knowledge.mark_failed(other.id, None, "no", "unknown"), status
        finalizing = row(parse_status=ParseStatus.FINALIZING)
        repos.knowledge.insert(finalizing)
        assert repos.knowledge.mark_failed(finalizing.id, None, "stuck", "task_timeout")
        assert not repos.knowledge.mark_failed(new_id(), None, "missing", "unknown")

    def test_mark_failed_can_be_conditional_on_the_row_not_written_since_it_was_read(
        self, repos: Repos
    ) -> None:
        k = row()
        repos.knowledge.insert(k)
        read = repos.knowledge.get(k.id)
        assert read is not None
        time.sleep(0.002)
        assert repos.knowledge.begin_processing(k.id, 1) is not None  # written after the read
        assert not repos.knowledge.mark_failed(
            k.id, 1, "stuck", "task_timeout", not_written_after=to_iso(read.updated_at)
        )
        current = repos.knowledge.get(k.id)
        assert current is not None and current.parse_status == ParseStatus.PROCESSING
        assert repos.knowledge.mark_failed(
            k.id, 1, "stuck", "task_timeout", not_written_after=to_iso(current.updated_at)
        )

    def test_the_planner_settles_a_processing_row_once_with_the_exact_count(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.PROCESSING, error_message="an earlier try")
        repos.knowledge.insert(k)
        plan = {"planned": ["summary", "questions.0"], "not_planned": {}}
        assert repos.knowledge.settle_plan(k.id, 2, 2, plan) is None  # another attempt
        settled = repos.knowledge.settle_plan(k.id, 1, 2, plan, summary_pending=True)
        assert settled is not None and settled.parse_status == ParseStatus.FINALIZING
        assert (settled.pending_subtasks_count, settled.enrichment, settled.error_message) == (2, plan, "")
        assert settled.summary_status == SummaryStatus.PENDING  # in the same write
        assert repos.knowledge.settle_plan(k.id, 1, 2, plan) is None  # a second copy: only from processing
        nothing = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(nothing)
        done = repos.knowledge.settle_plan(nothing.id, 1, 0, {"planned": [], "not_planned": {}})
        assert done is not None and done.parse_status == ParseStatus.COMPLETED
        assert done.summary_status == nothing.summary_status  # no summary planned: left as it was
        assert done.pending_subtasks_count == 0
        assert k.id in {r.id for r in repos.knowledge.in_flight_older_than(IN_AN_HOUR)}
        assert nothing.id not in {r.id for r in repos.knowledge.in_flight_older_than(IN_AN_HOUR)}
        cancelled = row(parse_status=ParseStatus.CANCELLED)
        repos.knowledge.insert(cancelled)
        assert repos.knowledge.settle_plan(cancelled.id, 1, 1, plan) is None

    def test_the_enrichment_map_is_replaced_only_while_it_is_as_read(self, repos: Repos) -> None:
        """The auto-tag's claim (stages/enrichment.py): of copies that read the settled plan and add their
        claim to it, one wins; its finish mark holds only over its own claim."""
        k = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(k)
        plan = {"planned": ["summary", "questions.0"], "not_planned": {"graph": "off: ünset"}}
        settled = repos.knowledge.settle_plan(k.id, 1, 2, plan)
        assert settled is not None
        claims = [{**settled.enrichment, "auto_tag": {"attempt": 1, "claimed_at": str(n)}} for n in range(5)]
        expect = {"enrichment": settled.enrichment, "attempt": 1}
        with ThreadPoolExecutor(max_workers=5) as pool:
            outcomes = list(
                pool.map(
                    lambda c: repos.knowledge.update_fields(k.id, {"enrichment": c}, expect=expect), claims
                )
            )
        [won] = [o for o in outcomes if o is not None]
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.enrichment == won.enrichment and stored.enrichment["planned"]
        done = {**won.enrichment, "auto_tag": {**won.enrichment["auto_tag"], "done": True}}
        lost = next(c for c in claims if c != won.enrichment)
        assert repos.knowledge.update_fields(k.id, {"enrichment": done}, expect={"enrichment": lost}) is None
        assert repos.knowledge.update_fields(
            k.id, {"enrichment": done}, expect={"enrichment": won.enrichment}
        )
        assert (
            repos.knowledge.update_fields(k.id, {"enrichment": {}}, expect={"enrichment": done, "attempt": 2})
            is None
        )

    def test_each_slot_is_released_once_and_only_the_last_promotes(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(k)
        repos.knowledge.settle_plan(k.id, 1, 2, {"planned": ["summary", "wiki"], "not_planned": {}})
        assert repos.knowledge.release_slot(k.id, 2, "summary") is None  # another attempt
        assert repos.knowledge.release_slot(k.id, 1, "summary") == 1
        assert repos.knowledge.release_slot(k.id, 1, "summary") is None  # redelivered: counted once
        assert not repos.knowledge.promote(k.id, 1)  # a slot is still held
        assert repos.knowledge.release_slot(k.id, 1, "wiki") == 0
        assert repos.knowledge.release_slot(k.id, 1, "other") is None  # floored at zero
        assert not repos.knowledge.promote(k.id, 2)
        assert repos.knowledge.promote(k.id, 1)
        assert not repos.knowledge.promote(k.id, 1)  # already completed
        completed = repos.knowledge.get(k.id)
        assert completed is not None and completed.parse_status == ParseStatus.COMPLETED
        assert completed.pending_subtasks_count == 0
        assert k.id not in {r.id for r in repos.knowledge.in_flight_older_than(IN_AN_HOUR)}
        # a new plan (after a reparse) starts with no slot released
        again = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(again)
        repos.knowledge.settle_plan(again.id, 1, 1, {"planned": ["summary"], "not_planned": {}})
        assert repos.knowledge.cancel(again.id, "stop") is not None
        assert repos.knowledge.release_slot(again.id, 1, "summary") is None  # cancelled: nothing to release
        assert not repos.knowledge.promote(again.id, 1)

    def test_an_embedding_fan_out_is_planned_once_and_each_slice_released_once(self, repos: Repos) -> None:
        """Issue 27: the slice counter settles the embedding stage exactly once under duplicates."""
        k = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(k)
        assert not repos.knowledge.plan_embedding(k.id, 2, 2001, 3)  # another attempt
        assert repos.knowledge.plan_embedding(k.id, 1, 1001, 3)
        assert not repos.knowledge.plan_embedding(k.id, 1, 1001, 3)  # a second copy of the plan
        planned = repos.knowledge.get(k.id)
        assert planned is not None and (planned.embed_plan, planned.embed_slices_pending) == (1001, 3)
        assert repos.knowledge.release_embed_slice(k.id, 1, 1002, 0) is None  # another plan
        assert repos.knowledge.release_embed_slice(k.id, 2, 1001, 0) is None  # another attempt
        assert repos.knowledge.release_embed_slice(k.id, 1, 1001, 0) == 2
        assert repos.knowledge.release_embed_slice(k.id, 1, 1001, 0) is None  # redelivered: counted once
        assert repos.knowledge.release_embed_slice(k.id, 1, 1001, 2) == 1
        assert repos.knowledge.release_embed_slice(k.id, 1, 1001, 1) == 0
        assert repos.knowledge.release_embed_slice(k.id, 1, 1001, 3) is None  # floored at zero
        assert not repos.knowledge.finish_embedding(k.id, 1, 1002)  # another plan
        assert repos.knowledge.finish_embedding(k.id, 1, 1001)  # handed over
        assert not repos.knowledge.finish_embedding(k.id, 1, 1001)  # once
        finished = repos.knowledge.get(k.id)
        assert finished is not None and finished.embed_slices_pending == -1
        # the next generation (a model switch) starts with no slice released
        assert repos.knowledge.plan_embedding(k.id, 1, 1002, 2)
        assert not repos.knowledge.plan_embedding(k.id, 1, 1001, 3)  # an older plan comes too late
        assert repos.knowledge.release_embed_slice(k.id, 1, 1002, 0) == 1
        assert repos.knowledge.cancel(k.id, "stop") is not None
        assert repos.knowledge.release_embed_slice(k.id, 1, 1002, 1) is None  # cancelled: nothing released
        again = repos.knowledge.get(k.id)
        assert again is not None and again.embed_slices_pending == 1

    def test_a_delete_try_on_a_row_being_deleted_restarts_housekeepings_wait(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        first = repos.knowledge.mark_deleting(k.id)
        assert first is not None and first.parse_status == ParseStatus.DELETING
        assert k.id in {r.id for r in repos.knowledge.deleting_older_than(IN_AN_HOUR)}
        time.sleep(0.01)
        again = repos.knowledge.mark_deleting(k.id)  # the next try (a redelivery, a redriven task)
        assert again is not None and again.parse_status == ParseStatus.DELETING
        assert again.updated_at > first.updated_at
        assert repos.knowledge.mark_deleting(new_id()) is None

    def test_a_knowledge_bases_delete_marks_only_rows_still_in_it(self, repos: Repos) -> None:
        """`in_kb`: a row a move took out after the delete listed it is neither marked nor touched."""
        k = row(parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        elsewhere = f"kb-{uuid.uuid4().hex[:8]}"
        after_move = repos.knowledge.move_to_kb(k.id, k.kb_id, elsewhere, "")
        assert after_move is not None
        time.sleep(0.01)
        assert repos.knowledge.mark_deleting(k.id, in_kb=k.kb_id) is None
        moved = repos.knowledge.get(k.id)
        assert moved is not None and moved.parse_status == ParseStatus.COMPLETED
        assert moved.kb_id == elsewhere and moved.updated_at == after_move.updated_at
        marked = repos.knowledge.mark_deleting(k.id, in_kb=elsewhere)
        assert marked is not None and marked.parse_status == ParseStatus.DELETING
        time.sleep(0.01)
        assert repos.knowledge.mark_deleting(k.id, in_kb=k.kb_id) is None  # being deleted, not there: as is
        unchanged = repos.knowledge.get(k.id)
        assert unchanged is not None and unchanged.updated_at == marked.updated_at
        again = repos.knowledge.mark_deleting(k.id, in_kb=elsewhere)
        assert again is not None and again.updated_at > marked.updated_at
        assert repos.knowledge.mark_deleting(new_id(), in_kb=elsewhere) is None

    def test_mark_indexed_enables_a_processing_row_of_the_attempt(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        assert not repos.knowledge.mark_indexed(k.id, 1, chunk_count=3, storage_size=9, completed=False)
        repos.knowledge.begin_processing(k.id, 1)
        assert not repos.knowledge.mark_indexed(k.id, 2, chunk_count=3, storage_size=9, completed=False)
        assert repos.knowledge.mark_indexed(k.id, 1, chunk_count=3, storage_size=9, completed=False)
        indexed = repos.knowledge.get(k.id)
        assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
        assert indexed.parse_status == ParseStatus.PROCESSING and indexed.processed_at is not None
        assert (indexed.chunk_count, indexed.storage_size) == (3, 9)
        assert k.id in {r.id for r in repos.knowledge.in_flight_older_than(IN_AN_HOUR)}

        done = row()
        repos.knowledge.insert(done)
        repos.knowledge.begin_processing(done.id, 1)
        assert repos.knowledge.mark_indexed(done.id, 1, chunk_count=1, storage_size=1, completed=True)
        completed = repos.knowledge.get(done.id)
        assert completed is not None and completed.parse_status == ParseStatus.COMPLETED
        assert done.id not in {r.id for r in repos.knowledge.in_flight_older_than(IN_AN_HOUR)}

    def test_reset_for_reparse_of_an_unindexed_attempt_holds_only_while_it_is_unindexed(
        self, repos: Repos
    ) -> None:
        k = row()
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        reset = repos.knowledge.reset_for_reparse(k.id, None, unindexed_attempt=1)
        assert reset.attempt == 2
        with pytest.raises(LookupError):  # the row is at attempt 2 now
            repos.knowledge.reset_for_reparse(k.id, None, unindexed_attempt=1)
        repos.knowledge.begin_processing(k.id, 2)
        repos.knowledge.mark_indexed(k.id, 2, chunk_count=1, storage_size=10, completed=False)
        with pytest.raises(LookupError):  # indexed meanwhile
            repos.knowledge.reset_for_reparse(k.id, None, unindexed_attempt=2)
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 2 and stored.processed_at is not None

    def test_reset_for_reparse_at_an_attempt_holds_only_while_the_row_is_at_it(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        repos.knowledge.mark_indexed(k.id, 1, chunk_count=1, storage_size=10, completed=True)
        assert repos.knowledge.reset_for_reparse(k.id, None, at_attempt=1).attempt == 2
        with pytest.raises(LookupError):  # a second reparse that read attempt 1: another made attempt 2
            repos.knowledge.reset_for_reparse(k.id, None, at_attempt=1)
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 2

    def test_reset_for_reparse_starts_a_clean_attempt(self, repos: Repos) -> None:
        k = row(description="old summary")
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        repos.knowledge.mark_indexed(k.id, 1, chunk_count=5, storage_size=10, completed=True)
        reset = repos.knowledge.reset_for_reparse(k.id, None)
        assert reset.attempt == 2 and reset.parse_status == ParseStatus.PENDING
        assert reset.enable_status == EnableStatus.DISABLED and reset.processed_at is None
        assert (reset.description, reset.error_message, reset.chunk_count) == ("", "", 0)
        assert reset.process_overrides == {"chunking": {"chunk_size": 256}}  # kept when not given
        again = repos.knowledge.reset_for_reparse(k.id, {"summary_enabled": False})
        assert again.attempt == 3 and again.process_overrides == {"summary_enabled": False}
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 3

    def test_a_new_attempt_leaves_the_earlier_attempts_summary_state_behind(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        repos.knowledge.set_summary_status(k.id, SummaryStatus.PROCESSING.value)
        reset = repos.knowledge.reset_for_reparse(k.id, None)
        assert reset.summary_status == SummaryStatus.NONE
        # not taken for a stuck summary of the new attempt
        assert k.id not in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}
        repos.knowledge.set_summary_status(k.id, SummaryStatus.PENDING.value)
        repos.knowledge.mark_failed(k.id, 2, "boom", "unknown")
        fresh = repos.knowledge.restart_attempt(k.id, 2, frozenset({ParseStatus.FAILED}))
        assert fresh is not None and fresh.summary_status == SummaryStatus.NONE
        assert k.id not in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}

    def test_restart_attempt_moves_on_only_from_that_attempt_and_those_states(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        failed = frozenset({ParseStatus.FAILED})
        assert repos.knowledge.restart_attempt(k.id, 1, failed) is None  # processing, not failed
        repos.knowledge.mark_failed(k.id, 1, "boom", "unknown")
        assert repos.knowledge.restart_attempt(k.id, 2, failed) is None  # not that attempt
        fresh = repos.knowledge.restart_attempt(k.id, 1, failed)
        assert fresh is not None and fresh.attempt == 2 and fresh.parse_status == ParseStatus.PENDING
        assert (fresh.error_message, fresh.error_code, fresh.chunk_count) == ("", "", 0)
        assert repos.knowledge.restart_attempt(k.id, 1, failed) is None  # a second redrive: no-op
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 2 and stored.parse_status == ParseStatus.PENDING
        assert repos.knowledge.restart_attempt(new_id(), 1, failed) is None
        in_flight = repos.knowledge.in_flight_older_than(IN_AN_HOUR)
        assert k.id in {r.id for r in in_flight}

    @pytest.mark.parametrize("status", [ParseStatus.DRAFT, ParseStatus.DELETING])
    def test_drafts_and_rows_being_deleted_cannot_be_reparsed(
        self, repos: Repos, status: ParseStatus
    ) -> None:
        k = row(parse_status=status)
        repos.knowledge.insert(k)
        with pytest.raises(LookupError):
            repos.knowledge.reset_for_reparse(k.id, None)
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 1 and stored.parse_status == status
        with pytest.raises(LookupError):
            repos.knowledge.reset_for_reparse(new_id(), None)

    def test_in_flight_rows_are_found_by_age_and_state(self, repos: Repos) -> None:
        old = datetime.now(UTC) - timedelta(hours=3)
        made = {status: row(parse_status=status, updated_at=old) for status in ParseStatus}
        for k in made.values():
            repos.knowledge.insert(k)
        fresh = row()
        repos.knowledge.insert(fresh)
        found = {k.id for k in repos.knowledge.in_flight_older_than(iso_before(3600))}
        in_flight = {ParseStatus.PENDING, ParseStatus.PROCESSING, ParseStatus.FINALIZING}
        assert {s for s, k in made.items() if k.id in found} == in_flight
        assert fresh.id not in found

    def test_a_released_slot_is_known_for_its_attempt_only(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.PROCESSING)
        repos.knowledge.insert(k)
        repos.knowledge.settle_plan(k.id, 1, 2, {"planned": ["graph.0", "summary"], "not_planned": {}})
        assert not repos.knowledge.slot_released(k.id, 1, "graph.0")
        assert repos.knowledge.release_slot(k.id, 1, "graph.0") == 1
        assert repos.knowledge.slot_released(k.id, 1, "graph.0")
        assert not repos.knowledge.slot_released(k.id, 1, "summary")
        assert not repos.knowledge.slot_released(k.id, 2, "graph.0")  # another attempt
        assert not repos.knowledge.slot_released(new_id(), 1, "graph.0")  # no such row

    def test_a_summary_status_written_for_an_attempt_leaves_another_attempts_be(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.FINALIZING, attempt=2, description="")
        repos.knowledge.insert(k)
        assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PROCESSING.value, attempt=2)
        assert not repos.knowledge.set_summary_status(k.id, SummaryStatus.PENDING.value, attempt=1)
        failed = SummaryStatus.FAILED.value
        processing = SummaryStatus.PROCESSING.value
        assert not repos.knowledge.set_summary_status(
            k.id, failed, only_if=processing, description="old", attempt=1
        )
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.summary_status == SummaryStatus.PROCESSING
        assert stored.description == ""
        assert repos.knowledge.set_summary_status(
            k.id, SummaryStatus.COMPLETED.value, only_if=processing, description="new", attempt=2
        )
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.summary_status == SummaryStatus.COMPLETED
        assert stored.description == "new"
        assert not repos.knowledge.set_summary_status(new_id(), failed, attempt=2)

    def test_summary_status_and_the_stuck_summary_query(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PROCESSING.value)
        assert k.id in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}
        assert k.id not in {r.id for r in repos.knowledge.summaries_unsettled_older_than(iso_before(3600))}
        assert not repos.knowledge.set_summary_status(k.id, "failed", only_if=SummaryStatus.PENDING.value)
        assert repos.knowledge.set_summary_status(k.id, "failed", only_if=SummaryStatus.PROCESSING.value)
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.summary_status == SummaryStatus.FAILED
        assert k.id not in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}
        assert not repos.knowledge.set_summary_status(new_id(), "completed")
        # a pending summary is unsettled too, whether a refresh or the plan set it
        assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PENDING.value)
        assert k.id in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}
        planned = row()
        repos.knowledge.insert(planned)
        repos.knowledge.begin_processing(planned.id, 1)
        repos.knowledge.settle_plan(planned.id, 1, 1, {"planned": ["summary"]}, summary_pending=True)
        assert planned.id in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}

    def test_the_summary_and_its_status_in_one_write(self, repos: Repos) -> None:
        k = row(parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PROCESSING.value)
        done = SummaryStatus.COMPLETED.value
        assert repos.knowledge.set_summary_status(k.id, done, description="A summary.")
        stored = repos.knowledge.get(k.id)
        assert stored is not None and (stored.summary_status, stored.description) == (done, "A summary.")
        assert k.id not in {r.id for r in repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)}
        assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PENDING.value)  # no description given
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.description == "A summary."  # kept
        assert not repos.knowledge.set_summary_status(new_id(), done, description="nobody")  # none created

    def test_move_to_kb_moves_a_completed_row_with_its_claim_and_clears_its_tags(self, repos: Repos) -> None:
        old_key, new_key = key(), key()
        k = row(dedupe_key=old_key, parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        moved = repos.knowledge.move_to_kb(k.id, k.kb_id, "kb-target", new_key)
        assert moved is not None and (moved.kb_id, moved.dedupe_key, moved.tag_ids) == (
            "kb-target",
            new_key,
            [],
        )
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.kb_id == "kb-target" and stored.dedupe_key == new_key
        assert repos.knowledge.find_duplicate(old_key) is None  # released: the source may take it again
        holder = repos.knowledge.find_duplicate(new_key)
        assert holder is not None and holder.id == k.id
        repos.knowledge.insert(row(dedupe_key=old_key))
        assert repos.knowledge.move_to_kb(k.id, k.kb_id, "kb-other", key()) is None  # not in that KB now
        assert [r.id for r in repos.knowledge.page_by_kb("kb-target", limit=10)] == [k.id]

    def test_move_to_kb_refuses_a_live_duplicate_and_rows_not_completed(self, repos: Repos) -> None:
        target_key = key()
        holder = row(dedupe_key=target_key, parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(holder)
        k = row(dedupe_key=key(), parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        with pytest.raises(DuplicateKnowledge) as raised:
            repos.knowledge.move_to_kb(k.id, k.kb_id, "kb-target", target_key)
        assert raised.value.existing.id == holder.id
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.kb_id == k.kb_id and stored.tag_ids == ["a", "b"]
        assert repos.knowledge.find_duplicate(k.dedupe_key) is not None  # its own claim is kept
        assert repos.knowledge.mark_failed(holder.id, None, "broken", "unknown") is False  # completed
        pending = row(dedupe_key=key())
        repos.knowledge.insert(pending)
        assert repos.knowledge.move_to_kb(pending.id, pending.kb_id, "kb-target", key()) is None
        assert repos.knowledge.move_to_kb(new_id(), "kb", "kb-target", key()) is None

    def test_move_to_kb_takes_over_a_failed_holder_of_the_target_claim(self, repos: Repos) -> None:
        target_key = key()
        failed = row(dedupe_key=target_key)
        repos.knowledge.insert(failed)
        repos.knowledge.mark_failed(failed.id, None, "broken", "unknown")
        k = row(dedupe_key=key(), parse_status=ParseStatus.COMPLETED)
        repos.knowledge.insert(k)
        moved = repos.knowledge.move_to_kb(k.id, k.kb_id, "kb-target", target_key)
        assert moved is not None
        holder = repos.knowledge.find_duplicate(target_key)
        assert holder is not None and holder.id == k.id

    def test_in_flight_rows_are_read_in_order_from_just_after_a_position(self, repos: Repos) -> None:
        """Housekeeping's resumable read: (updated_at, id) order, lazily, from just after where the last
        sweep stopped, whether that row is still in flight or not."""
        from collections.abc import Iterator

        base = datetime(2001, 1, 1, tzinfo=UTC) + timedelta(seconds=uuid.uuid4().int % 10**7)
        made = [row(updated_at=base + timedelta(milliseconds=n)) for n in range(3)]
        for k in made:
            repos.knowledge.insert(k)
        first, second, third = (k.id for k in made)
        cutoff = to_iso(base + timedelta(seconds=1))

        def read(after: tuple[str, str] | None) -> list[str]:
            found = repos.knowledge.in_flight_after(cutoff, after)
            assert isinstance(found, Iterator)  # read as the caller goes on, not all at once
            return [k.id for k in found if k.id in {first, second, third}]

        def position(k: Knowledge) -> tuple[str, str]:
            return to_iso(k.updated_at), k.id

        assert read(None) == [first, second, third]
        assert read(position(made[0])) == [second, third]
        assert repos.knowledge.mark_failed(second, None, "stuck", "task_timeout")  # gone from the index
        assert read(position(made[1])) == [third]
        assert read(position(made[2])) == []
        assert read((cutoff, new_id())) == []  # a position past the cutoff: nothing after it
        assert [k.id for k in repos.knowledge.in_flight_after(to_iso(base), None) if k.id == first] == []

    def test_a_redriven_deletes_wait_restarts_only_on_the_row_as_read(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        read = repos.knowledge.mark_deleting(k.id)
        assert read is not None
        later = to_iso(datetime.now(UTC) + timedelta(hours=2))
        assert repos.knowledge.restart_delete_wait(k.id, later, not_written_after=to_iso(read.updated_at))
        restarted = repos.knowledge.get(k.id)
        assert restarted is not None and restarted.parse_status == ParseStatus.DELETING
        assert to_iso(restarted.updated_at) == later
        assert k.id not in {r.id for r in repos.knowledge.deleting_older_than(IN_AN_HOUR)}
        # written since that read (another sweep, a delete try): the stale read restarts nothing
        assert not repos.knowledge.restart_delete_wait(k.id, later, not_written_after=to_iso(read.updated_at))
        pending = row()
        repos.knowledge.insert(pending)
        now = to_iso(datetime.now(UTC))
        assert not repos.knowledge.restart_delete_wait(pending.id, now, not_written_after=IN_AN_HOUR)
        assert not repos.knowledge.restart_delete_wait(new_id(), now, not_written_after=IN_AN_HOUR)

    def test_deleting_rows_and_unsettled_summaries_are_read_lazily_oldest_first(self, repos: Repos) -> None:
        """Housekeeping's two other reads: oldest first, read as the sweep goes on (a backlog of thousands is
        not read into memory before the first row is handled)."""
        from collections.abc import Iterator

        base = datetime(2003, 1, 1, tzinfo=UTC) + timedelta(seconds=uuid.uuid4().int % 10**7)
        deleting = [
            row(parse_status=ParseStatus.DELETING, updated_at=base + timedelta(milliseconds=n))
            for n in (2, 0, 1)
        ]
        for k in deleting:
            repos.knowledge.insert(k)
        found = repos.knowledge.deleting_older_than(to_iso(base + timedelta(seconds=1)))
        assert isinstance(found, Iterator)
        ours = {k.id for k in deleting}
        assert [k.id for k in found if k.id in ours] == [deleting[1].id, deleting[2].id, deleting[0].id]
        summarised = [row(parse_status=ParseStatus.COMPLETED) for _ in range(3)]
        for k in summarised:
            repos.knowledge.insert(k)
        for k in reversed(summarised):  # claimed last to first: the last row's summary is the oldest
            time.sleep(0.002)  # each in a later millisecond
            assert repos.knowledge.set_summary_status(k.id, SummaryStatus.PROCESSING.value)
        found = repos.knowledge.summaries_unsettled_older_than(IN_AN_HOUR)
        assert isinstance(found, Iterator)
        ours = {k.id for k in summarised}
        assert [k.id for k in found if k.id in ours] == [k.id for k in reversed(summarised)]

    def test_a_summary_status_can_be_conditional_on_the_row_not_written_since_it_was_read(
        self, repos: Repos
    ) -> None:
        """Housekeeping fails a stale summary on the row as read: a summary task that claimed it again since
        (enrichment's claim: processing from processing, which writes the row) wins."""
        k = row(parse_status=ParseStatus.FINALIZING)
        repos.knowledge.insert(k)
        processing, failed = SummaryStatus.PROCESSING.value, SummaryStatus.FAILED.value
        assert repos.knowledge.set_summary_status(k.id, processing, attempt=1)
        read = repos.knowledge.get(k.id)
        assert read is not None
        time.sleep(0.002)  # the claim lands in a later millisecond than the row as read
        assert repos.knowledge.set_summary_status(k.id, processing, only_if=processing, attempt=1)
        assert not repos.knowledge.set_summary_status(
            k.id, failed, only_if=processing, attempt=1, not_written_after=to_iso(read.updated_at)
        )
        current = repos.knowledge.get(k.id)
        assert current is not None and current.summary_status == SummaryStatus.PROCESSING
        assert repos.knowledge.set_summary_status(
            k.id, failed, only_if=processing, attempt=1, not_written_after=to_iso(current.updated_at)
        )
        current = repos.knowledge.get(k.id)
        assert current is not None and current.summary_status == SummaryStatus.FAILED

    # ------------------------------------------------------------ chunks

    def _chunks(self, knowledge_id: str, attempt: int, n: int) -> list[Chunk]:
        return [
            Chunk(
                id=chunk_id(knowledge_id, attempt, seq),
                tenant_id="t1",
                kb_id="kb",
                knowledge_id=knowledge_id,
                seq=seq,
                content=f"chunk {seq}",
                metadata={"attempt": attempt},
            )
            for seq in range(n)
        ]

    def test_some_chunks_are_deleted_by_id(self, repos: Repos) -> None:
        k = new_id()
        chunks = self._chunks(k, 1, 30)
        repos.chunks.put_many(chunks)
        repos.chunks.delete_many(k, [c.id for c in chunks[:27]] + ["missing", chunks[0].id])
        assert [c.id for c in repos.chunks.list(k)] == [c.id for c in chunks[27:]]

    def test_a_chunk_is_put_only_while_it_is_the_one_read(self, repos: Repos) -> None:
        k = new_id()
        stored = self._chunks(k, 1, 1)[0]
        repos.chunks.put_many([stored])
        read = repos.chunks.get_many([(k, stored.id)])[(k, stored.id)]
        off = replace(read, is_enabled=False)
        assert repos.chunks.put_unchanged(read, off)  # unchanged since read: written
        after = repos.chunks.get_many([(k, stored.id)])[(k, stored.id)]
        assert after == replace(off, created_at=after.created_at)
        # a write with the row read before the switch-off writes nothing: the switch stays
        assert not repos.chunks.put_unchanged(read, replace(read, content="edited"))
        assert repos.chunks.get_many([(k, stored.id)])[(k, stored.id)] == after
        assert repos.chunks.put_unchanged(after, replace(after, content="edited"))
        assert repos.chunks.get_many([(k, stored.id)])[(k, stored.id)].content == "edited"
        repos.chunks.delete_many(k, [stored.id])  # gone: nothing written back
        assert not repos.chunks.put_unchanged(after, replace(after, content="again"))
        assert repos.chunks.get_many([(k, stored.id)]) == {}

    def test_chunks_are_replaced_listed_in_order_and_deleted(self, repos: Repos) -> None:
        kid = new_id()
        first = self._chunks(kid, 1, 12)
        repos.chunks.replace_all(kid, first)
        parent = replace(
            first[0], id=chunk_id(kid, 1, 0, parent=True), seq=0, chunk_type=ChunkType.PARENT_TEXT
        )
        repos.chunks.put_many([parent])
        listed = repos.chunks.list(kid)
        assert [c.id for c in listed] == [parent.id] + [c.id for c in first]  # parents first, then by seq
        assert listed[1] == replace(first[0], created_at=listed[1].created_at)
        second = self._chunks(kid, 2, 3)
        repos.chunks.replace_all(kid, second)
        assert [c.id for c in repos.chunks.list(kid)] == [c.id for c in second]  # stale chunks are gone
        assert repos.chunks.delete_all(kid) == 3
        assert repos.chunks.list(kid) == [] and repos.chunks.delete_all(kid) == 0

    def test_list_page_reads_one_attempt_in_id_order_a_page_at_a_time(self, repos: Repos) -> None:
        kid, other = new_id(), new_id()
        first = self._chunks(kid, 1, 7)
        parent = replace(
            first[0], id=chunk_id(kid, 1, 0, parent=True), seq=0, chunk_type=ChunkType.PARENT_TEXT
        )
        tenth = self._chunks(kid, 10, 2)  # attempt 10's ids share attempt 1's "-a1" but not its "-a1-"
        repos.chunks.put_many([*first, parent, *self._chunks(kid, 2, 3), *tenth, *self._chunks(other, 1, 4)])
        prefix = attempt_chunk_prefix(kid, 1)
        pages: list[list[str]] = []
        after: str | None = None
        while True:
            page, after = repos.chunks.list_page(kid, prefix=prefix, after=after, limit=3)
            pages.append([c.id for c in page])
            if after is None:
                break
            assert after == page[-1].id
        expected = sorted([c.id for c in first] + [parent.id])  # the range key's order: digits before "p"
        assert pages == [expected[0:3], expected[3:6], expected[6:8]]
        again, cursor = repos.chunks.list_page(kid, prefix=prefix, after=expected[2], limit=3)
        assert [c.id for c in again] == expected[3:6] and cursor == expected[5]  # a cursor rereads its page
        got = {c.id: c for c in again}[first[3].id]
        assert got == replace(first[3], created_at=got.created_at)
        exact, last = repos.chunks.list_page(kid, prefix=prefix, limit=8)  # exactly the rest: no cursor
        assert [c.id for c in exact] == expected and last is None
        everything, more = repos.chunks.list_page(kid, limit=100)  # no prefix: every attempt
        assert len(everything) == 7 + 1 + 3 + 2 and more is None
        assert repos.chunks.list_page(kid, prefix=attempt_chunk_prefix(kid, 3), limit=5) == ([], None)
        assert repos.chunks.list_page(new_id(), limit=5) == ([], None)

    def test_list_page_keeps_sequence_order_past_99999(self, repos: Repos) -> None:
        kid = new_id()
        base = self._chunks(kid, 1, 1)[0]
        seqs = [9_999, 10_000, 99_999, 100_000, 100_001, 149_999, 1_000_000]
        texts = [replace(base, id=chunk_id(kid, 1, s), seq=s) for s in seqs]
        image = replace(base, id=image_chunk_id(kid, 1, 0), seq=0, chunk_type=ChunkType.IMAGE_OCR)
        parents = [
            replace(base, id=chunk_id(kid, 1, s, parent=True), seq=s, chunk_type=ChunkType.PARENT_TEXT)
            for s in (99_999, 100_000)
        ]
        repos.chunks.put_many([*reversed(parents), image, *reversed(texts)])
        page, after = repos.chunks.list_page(kid, prefix=attempt_chunk_prefix(kid, 1), limit=100)
        # text chunks in number order (100,000 had sorted between 10,000 and 10,001), then images, then parents
        assert [c.id for c in page] == [c.id for c in (*texts, image, *parents)] and after is None
        assert chunk_id(kid, 1, 99_999).endswith("-99999")  # the five-digit ids already written stay valid

    def test_get_many_reads_across_knowledge_and_skips_missing(self, repos: Repos) -> None:
        a, b = new_id(), new_id()
        repos.chunks.put_many(self._chunks(a, 1, 2) + self._chunks(b, 1, 1))
        wanted = [(a, chunk_id(a, 1, 1)), (b, chunk_id(b, 1, 0)), (b, "missing"), (a, chunk_id(a, 1, 1))]
        found = repos.chunks.get_many(wanted)
        assert set(found) == {(a, chunk_id(a, 1, 1)), (b, chunk_id(b, 1, 0))}
        assert found[(b, chunk_id(b, 1, 0))].content == "chunk 0"

    def test_set_metadata_sets_one_key_of_the_chunk_as_stored_only_in_its_kb_and_attempt(
        self, repos: Repos
    ) -> None:
        k = new_id()
        first, second = self._chunks(k, 2, 2)
        repos.chunks.put_many([first, second])
        edited = replace(first, content="edited", metadata={**first.metadata, "note": "kept"})
        repos.chunks.put_many([edited])  # written after the caller read `first`: the edit stays
        assert repos.chunks.set_metadata(k, first.id, "see_also", ["B", "C"], kb_id="kb", attempt=2)
        stored = repos.chunks.get_many([(k, first.id)])[(k, first.id)]
        assert stored.content == "edited"
        assert stored.metadata == {"attempt": 2, "note": "kept", "see_also": ["B", "C"]}
        assert repos.chunks.set_metadata(k, first.id, "see_also", [], kb_id="kb", attempt=2)
        assert repos.chunks.get_many([(k, first.id)])[(k, first.id)].metadata["see_also"] == []
        assert not repos.chunks.set_metadata(k, second.id, "see_also", ["B"], kb_id="kb", attempt=1)
        assert not repos.chunks.set_metadata(k, second.id, "see_also", ["B"], kb_id="other", attempt=2)
        assert not repos.chunks.set_metadata(k, "missing", "see_also", ["B"], kb_id="kb", attempt=2)
        assert "see_also" not in repos.chunks.get_many([(k, second.id)])[(k, second.id)].metadata
        assert len(repos.chunks.list(k)) == 2  # nothing written for a chunk that is not there

    def test_merge_image_info_sets_fields_on_one_url_entry_keeping_the_rest_of_the_chunk(
        self, repos: Repos
    ) -> None:
        k = new_id()
        first, second = self._chunks(k, 2, 2)
        first = replace(
            first, image_info=[{"url": "mem://a.png"}, {"url": "mem://b.png", "original_url": "x"}]
        )
        repos.chunks.put_many([first, second])
        merge = repos.chunks.merge_image_info
        # two images of one chunk, each merged into its own entry: both survive
        assert merge(k, first.id, "mem://b.png", {"caption": "a crane"}, kb_id="kb", attempt=2)
        assert merge(k, first.id, "mem://a.png", {"ocr_text": "Berth 4"}, kb_id="kb", attempt=2)
        assert merge(k, first.id, "mem://a.png", {"caption": "a sign"}, kb_id="kb", attempt=2)
        assert merge(k, first.id, "mem://a.png", {"caption": "a sign"}, kb_id="kb", attempt=2)  # again: held
        assert merge(
            k, first.id, "mem://c.png", {"caption": "a map"}, kb_id="kb", attempt=2
        )  # not shown: added
        stored = repos.chunks.get_many([(k, first.id)])[(k, first.id)]
        assert stored.image_info == [
            {"url": "mem://a.png", "ocr_text": "Berth 4", "caption": "a sign"},
            {"url": "mem://b.png", "original_url": "x", "caption": "a crane"},
            {"url": "mem://c.png", "caption": "a map"},
        ]
        assert (stored.content, stored.seq, stored.metadata) == (first.content, first.seq, first.metadata)
        assert not merge(k, second.id, "mem://a.png", {"caption": "x"}, kb_id="kb", attempt=1)
        assert not merge(k, second.id, "mem://a.png", {"caption": "x"}, kb_id="other", attempt=2)
        assert not merge(k, "missing", "mem://a.png", {"caption": "x"}, kb_id="kb", attempt=2)
        assert repos.chunks.get_many([(k, second.id)])[(k, second.id)].image_info == []
        assert len(repos.chunks.list(k)) == 2  # nothing written for a chunk that is not there

    def test_repoint_changes_only_the_kb_id_of_the_chunks_in_another_kb(self, repos: Repos) -> None:
        k = new_id()
        first, second, third = self._chunks(k, 1, 3)
        repos.chunks.put_many([first, second, replace(third, kb_id="target")])
        edited = replace(first, content="edited", content_hash="h", metadata={"attempt": 1, "edited": True})
        repos.chunks.put_many([edited])  # written after the caller read `first`: the edit stays
        assert repos.chunks.repoint(k, "target") == 2
        stored = {c.id: c for c in repos.chunks.list(k)}
        assert stored[first.id] == replace(edited, kb_id="target", created_at=stored[first.id].created_at)
        assert (stored[second.id].kb_id, stored[second.id].content) == ("target", "chunk 1")
        assert stored[third.id].kb_id == "target"
        assert repos.chunks.repoint(k, "target") == 0  # idempotent
        assert repos.chunks.repoint(new_id(), "target") == 0  # no chunks: nothing written
        assert len(repos.chunks.list(k)) == 3

    # ------------------------------------------------------------ spans

    def test_spans_by_attempt_latest_attempt_and_last_activity(self, repos: Repos) -> None:
        kid = new_id()
        assert repos.spans.latest_attempt(kid) == 0 and repos.spans.last_activity_iso(kid) is None
        base = datetime(2026, 1, 1, tzinfo=UTC)
        spans = [
            Span(kid, 1, "root", "root", SpanKind.ROOT, SpanStatus.RUNNING, updated_at=base),
            Span(kid, 1, "docreader", "docreader", SpanKind.STAGE, SpanStatus.DONE, updated_at=base),
            Span(kid, 2, "root", "root", SpanKind.ROOT, updated_at=base + timedelta(minutes=5)),
            Span(kid, 2, "chunking", "chunking", SpanKind.STAGE, outputs={"n": 1}, updated_at=base),
        ]
        for span in spans:
            repos.spans.put(span)
        assert [s.span_id for s in repos.spans.list(kid, 1)] == ["docreader", "root"]
        assert repos.spans.latest_attempt(kid) == 2
        assert repos.spans.last_activity_iso(kid) == to_iso(base + timedelta(minutes=5))
        stored = repos.spans.get(kid, 2, "chunking")
        assert stored is not None and stored.outputs == {"n": 1} and stored.kind == SpanKind.STAGE
        assert repos.spans.get(kid, 3, "root") is None
        many = repos.spans.get_many(kid, 1, ["root", "docreader", "embedding", "root"])
        assert sorted(many) == ["docreader", "root"] and many["docreader"].status == SpanStatus.DONE
        assert repos.spans.get_many(kid, 3, ["root"]) == {}
        repos.spans.put(replace(spans[1], status=SpanStatus.FAILED, error_code="X"))
        updated = repos.spans.get(kid, 1, "docreader")
        assert updated is not None and updated.status == SpanStatus.FAILED and updated.error_code == "X"

    def test_span_counters_add_up_under_concurrent_writers_and_survive_span_writes(
        self, repos: Repos
    ) -> None:
        kid = new_id()
        span = Span(kid, 1, "embedding", "embedding", SpanKind.STAGE, SpanStatus.RUNNING, outputs={"x": 1})
        repos.spans.put(span)
        with ThreadPoolExecutor(max_workers=8) as pool:
            for future in [
                pool.submit(
                    repos.spans.add_counters, kid, 1, "embedding", {"entries_indexed": 5, "slices_done": 1}
                )
                for _ in range(16)
            ]:
                future.result()
        repos.spans.put(replace(span, outputs={"x": 2, "entries_indexed": 0}))  # a stage write meanwhile
        stored = repos.spans.get(kid, 1, "embedding")
        assert stored is not None
        assert stored.outputs == {"x": 2, "entries_indexed": 80, "slices_done": 16}
        assert repos.spans.get_many(kid, 1, ["embedding"])["embedding"].outputs["slices_done"] == 16
        assert repos.spans.list(kid, 1)[0].outputs["entries_indexed"] == 80
        repos.spans.add_counters(kid, 1, "embedding", {"entries_indexed": 0, "slices_done": 0}, reset=True)
        reset = repos.spans.get(kid, 1, "embedding")
        assert reset is not None and (reset.outputs["entries_indexed"], reset.outputs["slices_done"]) == (
            0,
            0,
        )
        with pytest.raises(ValueError):
            repos.spans.add_counters(kid, 1, "embedding", {"anything": 1})

    def test_many_chunks_are_written_and_replaced_in_parallel_batches(self, repos: Repos) -> None:
        kid = new_id()
        repos.chunks.replace_all(kid, self._chunks(kid, 1, 260))  # eleven batches of 25 or fewer
        assert len(repos.chunks.list(kid)) == 260
        repos.chunks.replace_all(kid, self._chunks(kid, 2, 90))
        assert [c.id for c in repos.chunks.list(kid)] == [c.id for c in self._chunks(kid, 2, 90)]
        repos.chunks.put_many(self._chunks(kid, 2, 120))  # an upsert of the same ninety and thirty more
        assert len(repos.chunks.list(kid)) == 120
        assert repos.chunks.delete_all(kid) == 120 and repos.chunks.list(kid) == []

    # ------------------------------------------------------------ tenants, knowledge bases, cache

    def test_tenants_by_id_and_by_api_key(self, repos: Repos) -> None:
        api_key = f"wk-{uuid.uuid4().hex}"
        tenant = Tenant(new_id(), "acme", api_key_hash(api_key), parser_engine_rules={"pdf": "markitdown"})
        repos.tenants.put(tenant)
        by_key = repos.tenants.by_api_key(api_key)
        assert by_key is not None and by_key.id == tenant.id
        assert by_key.parser_engine_rules == {"pdf": "markitdown"}
        assert repos.tenants.by_api_key("wk-wrong") is None and repos.tenants.get(new_id()) is None
        repos.tenants.put(replace(tenant, name="renamed"))
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and stored.name == "renamed"

    def test_tenant_quotas_and_their_counters(self, repos: Repos) -> None:
        tenant = Tenant(new_id(), "acme", api_key_hash(f"wk-{new_id()}"))
        repos.tenants.put(tenant)
        assert repos.tenants.reserve_document(tenant.id, 0)  # no limit
        limited = repos.tenants.set_quotas(tenant.id, 100, 2)
        assert limited is not None and (limited.storage_quota, limited.document_quota) == (100, 2)
        assert limited.document_count == 1  # the limits leave the counters alone
        assert repos.tenants.reserve_document(tenant.id, 2)
        assert not repos.tenants.reserve_document(tenant.id, 2)
        repos.tenants.release_document(tenant.id)
        assert repos.tenants.reserve_document(tenant.id, 2)
        repos.tenants.add_usage(tenant.id, 75)
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and (stored.storage_used, stored.document_count) == (75, 2)
        for _ in range(3):
            repos.tenants.release_document(tenant.id)  # never below zero
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and stored.document_count == 0
        repos.tenants.set_parser_engine_rules(tenant.id, {"pdf": "markitdown"})
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and stored.parser_engine_rules == {"pdf": "markitdown"}
        assert (stored.storage_used, stored.storage_quota) == (75, 100)  # the rules alone were written
        assert repos.tenants.set_quotas(new_id(), 1, 1) is None
        assert not repos.tenants.reserve_document(new_id(), 0)

    def test_indexing_within_quota_checks_the_quota_in_the_write_itself(self, repos: Repos) -> None:
        """Two documents indexed at once, each fitting the quota alone: one fits, the other raises, whatever
        the order the two writers read the tenant in."""
        tenant = Tenant(new_id(), "acme", api_key_hash(f"wk-{new_id()}"))
        repos.tenants.put(tenant)
        repos.tenants.set_quotas(tenant.id, 500, 0)
        rows = [row(tenant_id=tenant.id, file_size=300) for _ in range(2)]
        for written in rows:
            repos.knowledge.insert(written)
            assert repos.knowledge.begin_processing(written.id, written.attempt) is not None
        barrier = threading.Barrier(2)
        outcomes: list[str] = []
        read = getattr(repos.knowledge, "_storage", None)
        if read is not None:  # DynamoDB's: both writers read the tenant's usage before either writes
            first_reads = threading.Barrier(2)

            def both_read_first(tenant_id: str) -> Any:
                usage = read(tenant_id)
                if not first_reads.broken and first_reads.n_waiting + 1 <= first_reads.parties:
                    with contextlib.suppress(threading.BrokenBarrierError):
                        first_reads.wait(timeout=2)
                return usage

            repos.knowledge._storage = both_read_first  # type: ignore[attr-defined]

        def index(written: Knowledge) -> None:
            try:
                barrier.wait(timeout=10)
                repos.knowledge.mark_indexed(
                    written.id, 1, chunk_count=1, storage_size=300, completed=False, within_quota=True
                )
                outcomes.append("indexed")
            except StorageQuotaExceeded:
                outcomes.append("over quota")

        threads = [threading.Thread(target=index, args=(w,)) for w in rows]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if read is not None:
            del repos.knowledge._storage  # type: ignore[attr-defined]
        assert sorted(outcomes) == ["indexed", "over quota"]
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and stored.storage_used == 300
        again = next(w for w in rows if repos.knowledge.get(w.id).enable_status == EnableStatus.ENABLED)  # type: ignore[union-attr]
        assert (
            repos.knowledge.mark_indexed(  # a redelivery adds nothing, so it never counts against the quota
                again.id, 1, chunk_count=1, storage_size=300, completed=True, within_quota=True
            )
        )
        without = row(tenant_id=tenant.id, file_size=300)  # the default: a clone's copy, counted as before
        repos.knowledge.insert(without)
        repos.knowledge.begin_processing(without.id, 1)
        assert repos.knowledge.mark_indexed(without.id, 1, chunk_count=1, storage_size=300, completed=True)
        stored = repos.tenants.get(tenant.id)
        assert stored is not None and stored.storage_used == 600

    def test_indexing_counts_the_bytes_once_and_a_delete_gives_back_bytes_and_place_with_the_row(
        self, repos: Repos
    ) -> None:
        tenant = Tenant(new_id(), "acme", api_key_hash(f"wk-{new_id()}"))
        repos.tenants.put(tenant)
        assert repos.tenants.reserve_document(tenant.id, 0)
        written = row(tenant_id=tenant.id, file_size=300)
        repos.knowledge.insert(written)
        assert repos.knowledge.begin_processing(written.id, written.attempt) is not None

        def counts() -> tuple[int, int]:
            stored = repos.tenants.get(tenant.id)
            assert stored is not None
            return stored.storage_used, stored.document_count

        for _ in range(2):  # a redelivered hand-over sets the same size and adds nothing
            assert repos.knowledge.mark_indexed(
                written.id, written.attempt, chunk_count=3, storage_size=300, completed=False
            )
            assert counts() == (300, 1)
        assert repos.knowledge.mark_indexed(  # a reparse that stored a larger file: the difference
            written.id, written.attempt, chunk_count=3, storage_size=420, completed=True
        )
        assert counts() == (420, 1)
        assert not repos.knowledge.mark_indexed(  # another attempt's: nothing written, nothing counted
            written.id, written.attempt + 1, chunk_count=3, storage_size=999, completed=True
        )
        assert counts() == (420, 1)
        assert repos.knowledge.delete(written.id) and counts() == (0, 0)
        assert not repos.knowledge.delete(written.id) and counts() == (0, 0)  # a retried delete: nothing
        uncounted = row(tenant_id=tenant.id)  # a row from before document counts existed
        repos.knowledge.insert(uncounted)
        assert repos.knowledge.delete(uncounted.id) and counts() == (0, 0)  # never below zero

    def test_api_keys_by_hash_listed_per_tenant_and_revoked(self, repos: Repos) -> None:
        tenant = Tenant(new_id(), "acme", api_key_hash(f"wk-{new_id()}"))
        repos.tenants.put(tenant)
        first, secret = ApiKey.issue(tenant.id, "ci")
        second, _ = ApiKey.issue(tenant.id)
        other, _ = ApiKey.issue(new_id())
        for k in (first, second, other):
            repos.api_keys.put(k)
        got = repos.api_keys.get(api_key_hash(secret))
        assert got is not None and (got.tenant_id, got.name, got.revoked) == (tenant.id, "ci", False)
        assert got.id == first.id and repos.api_keys.get(api_key_hash("wk-nope")) is None
        assert {k.id for k in repos.api_keys.page(tenant.id, "", 10)} == {first.id, second.id}
        first.revoked_at = datetime.now(UTC)
        repos.api_keys.put(first)
        revoked = repos.api_keys.get(first.key_hash)
        assert revoked is not None and revoked.revoked and revoked.revoked_at is not None
        # Key records are not tenants: neither the tenant listing nor the primary-key lookup sees them.
        assert repos.tenants.by_api_key(secret) is None
        listed = {t.id: t for t in repos.tenants.page("", 1000)}
        assert tenant.id in listed and listed[tenant.id].name == "acme"
        assert not any(t.id.startswith("apikey#") or t.id == first.key_hash for t in listed.values())

    def test_tenants_are_read_a_page_at_a_time_each_once_and_no_key_or_share_record(
        self, repos: Repos
    ) -> None:
        """Pages of `limit` tenants, each going on after the last one's id, give every tenant once (the
        table is shared with other tests: the walk checks its own tenants) and no key or share record."""
        mine = {new_id() for _ in range(5)}
        for tenant_id in sorted(mine):
            repos.tenants.put(Tenant(tenant_id, "paged", api_key_hash(f"wk-{tenant_id}")))
            repos.api_keys.put(ApiKey.issue(tenant_id, "k")[0])
        repos.shares.add(sorted(mine)[0], new_id(), sorted(mine)[1])
        seen: list[str] = []
        after = ""
        while page := repos.tenants.page(after, 2):
            assert len(page) <= 2
            seen += [t.id for t in page]
            after = page[-1].id
        assert len(seen) == len(set(seen)) and mine <= set(seen)
        assert not any(i.startswith(("apikey#", "share#", "shared-with#")) for i in seen)

    def test_a_tenants_api_keys_are_read_a_page_at_a_time_each_once(self, repos: Repos) -> None:
        """Pages of `limit` keys, each going on after the last one's hash, give every key of the tenant once
        and none of another's (stored between them)."""
        tenant_id, other_id = new_id(), new_id()
        mine = [ApiKey.issue(tenant_id, f"k{n}")[0] for n in range(7)]
        for n, key in enumerate(mine):
            repos.api_keys.put(key)
            repos.api_keys.put(ApiKey.issue(other_id, f"o{n}")[0])
        pages, after = [], ""
        while page := repos.api_keys.page(tenant_id, after, 3):
            assert len(page) <= 3 and all(k.tenant_id == tenant_id for k in page)
            pages.append([k.id for k in page])
            after = page[-1].key_hash
        assert [len(page) for page in pages] == [3, 3, 1]
        assert sorted(i for page in pages for i in page) == sorted(k.id for k in mine)

    def test_an_api_keys_scope_and_knowledge_bases_read_back(self, repos: Repos) -> None:
        tenant_id = new_id()
        limited, secret = ApiKey.issue(tenant_id, "reader", Scope.READ, ("kb-1", "kb-2"))
        writer, _ = ApiKey.issue(tenant_id, "writer", Scope.WRITE)
        nothing, _ = ApiKey.issue(tenant_id, "none", Scope.READ, ())
        for k in (limited, writer, nothing):
            repos.api_keys.put(k)
        got = repos.api_keys.get(api_key_hash(secret))
        assert got is not None and (got.scope, got.kb_ids) == (Scope.READ, ("kb-1", "kb-2"))
        got = repos.api_keys.get(writer.key_hash)
        assert got is not None and (got.scope, got.kb_ids) == (Scope.WRITE, None)
        got = repos.api_keys.get(nothing.key_hash)
        assert got is not None and got.kb_ids == ()  # limited to none is not "every one"
        plain, _ = ApiKey.issue(tenant_id)  # a key issued without a scope is an admin key, as before
        repos.api_keys.put(plain)
        got = repos.api_keys.get(plain.key_hash)
        assert got is not None and (got.scope, got.kb_ids) == (Scope.ADMIN, None)

    def test_shares_of_a_knowledge_base(self, repos: Repos) -> None:
        assert repos.shares is not None
        kb_id, owner = new_id(), new_id()
        assert repos.shares.tenants_of(kb_id) == []
        repos.shares.add(owner, kb_id, "t-b")
        repos.shares.add(owner, kb_id, "t-a")
        repos.shares.add(owner, kb_id, "t-a")  # twice is once
        assert repos.shares.tenants_of(kb_id) == ["t-a", "t-b"]
        reader, other_kb = new_id(), new_id()
        repos.shares.add(owner, kb_id, reader)
        repos.shares.add(owner, other_kb, reader)
        assert repos.shares.shared_with(reader) == sorted([kb_id, other_kb])
        assert repos.shares.remove(kb_id, reader) is True
        assert repos.shares.shared_with(reader) == [other_kb]
        repos.shares.drop(other_kb)
        assert repos.shares.shared_with(reader) == []
        assert repos.shares.remove(kb_id, "t-a") is True
        assert repos.shares.remove(kb_id, "t-a") is False
        assert repos.shares.remove(new_id(), "t-a") is False
        assert repos.shares.tenants_of(kb_id) == ["t-b"]
        assert repos.shares.remove(kb_id, "t-b") is True
        assert repos.shares.tenants_of(kb_id) == []
        repos.shares.add(owner, kb_id, "t-c")
        repos.shares.drop(kb_id)
        repos.shares.drop(kb_id)  # twice, or with no shares: a no-op
        assert repos.shares.tenants_of(kb_id) == []
        # Share records are not tenants.
        assert not any(t.id.startswith(("share#", "shared-with#")) for t in repos.tenants.page("", 1000))

    def test_shares_capped_per_recipient_and_read_in_batches(self, repos: Repos) -> None:
        assert repos.shares is not None
        owner, reader = new_id(), new_id()
        kb_ids = sorted(new_id() for _ in range(3))
        assert repos.shares.add(owner, kb_ids[0], reader, cap=2) is True
        assert repos.shares.add(owner, kb_ids[1], reader, cap=2) is True
        assert repos.shares.add(owner, kb_ids[2], reader, cap=2) is False  # nothing written
        assert repos.shares.tenants_of(kb_ids[2]) == []
        assert repos.shares.add(owner, kb_ids[0], reader, cap=2) is True  # one it holds: no new share
        assert repos.shares.shared_with(reader) == kb_ids[:2]
        assert repos.shares.remove(kb_ids[0], reader) is True
        assert repos.shares.add(owner, kb_ids[2], reader, cap=2) is True
        assert repos.shares.shared_with(reader) == kb_ids[1:]
        many = [new_id() for _ in range(130)]  # more than one BatchGetItem holds
        for kb_id in many:
            assert repos.shares.add(owner, kb_id, reader) is True
        assert repos.shares.shared_with(reader) == sorted([*kb_ids[1:], *many])

    def test_a_share_half_removed_gives_back_its_place_under_the_cap(
        self, repos: Repos, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A remove that died between its two writes (the share item without the tenant, the reverse entry
        left) lists nothing and is declined as no share; the next add the cap refuses drops that entry and
        passes, rather than the stale entry holding a place for ever."""
        shares = repos.shares
        assert shares is not None
        owner, reader = new_id(), new_id()
        kb_ids = sorted(new_id() for _ in range(3))
        assert shares.add(owner, kb_ids[0], reader, cap=2) is True
        assert shares.add(owner, kb_ids[1], reader, cap=2) is True

        def crash(*_args: object) -> None:
            raise RuntimeError("the process ended between the two writes")

        with monkeypatch.context() as patch:
            patch.setattr(shares, "_unlist", crash)  # both adapters' remove ends with this write
            with pytest.raises(RuntimeError):
                shares.remove(kb_ids[0], reader)
        assert shares.shared_with(reader) == [kb_ids[1]]
        assert shares.remove(kb_ids[0], reader) is False
        assert shares.add(owner, kb_ids[2], reader, cap=2) is True
        assert shares.shared_with(reader) == kb_ids[1:]
        assert shares.add(owner, kb_ids[0], reader, cap=2) is False  # the live shares still fill the cap
        assert shares.tenants_of(kb_ids[0]) == []

    def test_knowledge_bases_paged_counted_and_read_in_a_batch(self, repos: Repos) -> None:
        tenant_id = new_id()
        kbs = [KnowledgeBase(new_id(), tenant_id, name) for name in ("c", "a", "b", "e", "d")]
        for kb in kbs:
            repos.kbs.put(kb)
        repos.kbs.put(KnowledgeBase(new_id(), new_id(), "b"))  # another tenant's
        first = repos.kbs.page(tenant_id, None, 2)
        assert [kb.name for kb in first] == ["a", "b"]
        rest = repos.kbs.page(tenant_id, (first[-1].name, first[-1].id), 10)
        assert [kb.name for kb in rest] == ["c", "d", "e"]
        assert repos.kbs.count(tenant_id, 10) == 5 and repos.kbs.count(tenant_id, 3) == 3
        found = repos.kbs.get_many([kbs[0].id, new_id(), kbs[3].id, kbs[0].id])
        assert {kb_id: kb.name for kb_id, kb in found.items()} == {kbs[0].id: "c", kbs[3].id: "e"}
        assert repos.kbs.get_many([]) == {}

    def test_knowledge_bases_by_id_name_and_tenant(self, repos: Repos) -> None:
        tenant_id = new_id()
        kbs = [KnowledgeBase(new_id(), tenant_id, name) for name in ("zeta", "alpha")]
        for kb in kbs:
            repos.kbs.put(kb)
        repos.kbs.put(KnowledgeBase(new_id(), new_id(), "alpha"))  # another tenant's
        found = repos.kbs.by_name(tenant_id, "alpha")
        assert found is not None and found.id == kbs[1].id
        assert found.chunking_config == kbs[1].chunking_config
        assert repos.kbs.by_name(tenant_id, "beta") is None
        assert [kb.name for kb in repos.kbs.page(tenant_id, None, 10)] == ["alpha", "zeta"]
        assert repos.kbs.get(new_id()) is None

    def test_a_knowledge_bases_storage_backend_reads_back_and_changes(self, repos: Repos) -> None:
        kb = KnowledgeBase(new_id(), new_id(), "bound", storage_backend="tc-cos")
        repos.kbs.put(kb)
        read = repos.kbs.get(kb.id)
        assert read is not None and read.storage_backend == "tc-cos"
        updated = repos.kbs.update(replace(read, storage_backend=""))
        assert updated is not None
        again = repos.kbs.get(kb.id)
        assert again is not None and again.storage_backend == ""
        assert KnowledgeBase(new_id(), new_id(), "plain").to_dict()["storage_backend"] == ""

    def test_a_knowledge_base_update_is_conditional_on_its_version(self, repos: Repos) -> None:
        kb = KnowledgeBase(new_id(), new_id(), "versioned")
        repos.kbs.put(kb)
        read = repos.kbs.get(kb.id)
        assert read is not None and read.version == 0
        first = repos.kbs.update(replace(read, description="one"))
        assert first is not None and first.version == 1
        assert repos.kbs.update(replace(read, description="stale")) is None  # a change came first
        stored = repos.kbs.get(kb.id)
        assert stored is not None and (stored.description, stored.version) == ("one", 1)
        second = repos.kbs.update(replace(stored, reembed_to={"task_id": "t"}))
        assert second is not None and second.version == 2
        again = repos.kbs.get(kb.id)
        assert again is not None and again.reembed_to == {"task_id": "t"}
        assert repos.kbs.update(KnowledgeBase(new_id(), new_id(), "missing")) is None

    def test_the_embedding_cache_keys_by_tenant_and_space_and_ignores_other_sizes(self, repos: Repos) -> None:
        space = IndexSpace(f"test/{uuid.uuid4().hex[:8]}", 4)
        other = IndexSpace(space.model_id, 8)
        tenant, stranger = new_id(), new_id()
        vector = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)
        repos.cache.put_many(tenant, space, {"h1": vector})
        repos.cache.put_many(tenant, other, {"h2": np.ones(4, dtype=np.float32)})  # wrong size for its space
        found = repos.cache.get_many(tenant, space, ["h1", "h2", "h1"])
        assert list(found) == ["h1"] and found["h1"].dtype == np.float32
        np.testing.assert_array_equal(found["h1"], vector)
        assert repos.cache.get_many(tenant, other, ["h1", "h2"]) == {}
        # another tenant's vector of the same text is never its hit (that would tell the text was embedded)
        assert repos.cache.get_many(stranger, space, ["h1"]) == {}
        repos.cache.put_many(stranger, space, {"h1": np.ones(4, dtype=np.float32)})
        np.testing.assert_array_equal(repos.cache.get_many(tenant, space, ["h1"])["h1"], vector)
