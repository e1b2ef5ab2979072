"""Spec §1.13: a summary that cannot be made is failed, the first 500 runes of its first text chunk standing
in as the description. One rule for the enrichment stage (too little text, a model that refuses it, its
tries run out) and for housekeeping (a summary no message will move any more)."""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib.domain.events import EventType, new_occurrence
from chalicelib.domain.plan import TEXT_LIKE
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, SummaryStatus
from chalicelib.ports import Dependencies
from chalicelib.services.chunk_pages import attempt_chunk_pages
from chalicelib.services.events import summary_changed

FALLBACK_RUNES = 500


def summarised_chunks(chunks: Iterable[Chunk]) -> dict[ChunkType, list[Chunk]]:
    """The text-like chunks a summary reads, by kind, in document order (a chunk disabled on its own is
    left out)."""
    listed = list(chunks)
    return {
        kind: sorted(
            (c for c in listed if c.chunk_type == kind and c.is_enabled), key=lambda c: (c.start_at, c.seq)
        )
        for kind in TEXT_LIKE
    }


def described_by_user(deps: Dependencies, knowledge: Knowledge) -> bool:
    """A description a person wrote (read now: it may have come while the model wrote) is never replaced."""
    current = deps.knowledge.get(knowledge.id)
    return current is not None and current.description_by_user


def summary_given_up(
    deps: Dependencies,
    knowledge: Knowledge,
    texts: list[str] | None = None,
    *,
    only_if: SummaryStatus = SummaryStatus.PROCESSING,
    not_written_after: str | None = None,
) -> bool:
    """Fails this attempt's summary, from `only_if` only (a superseded attempt's failure, or one that came
    after the summary moved on, leaves it be), with the fallback description unless a person wrote one.
    `texts`: the summary's text chunks when the caller has them. `not_written_after`: the `updated_at` the
    caller read (ISO), for a failure decided on the row as read (housekeeping): a summary claimed again since
    is left be. True when this call failed it."""
    if texts is None:
        texts = _first_text(deps, knowledge)
    fallback = None if described_by_user(deps, knowledge) else (texts[0] if texts else "")[:FALLBACK_RUNES]
    occurrence = new_occurrence()  # kept on the row: a redelivery announces the failure again under its id
    if not deps.knowledge.set_summary_status(
        knowledge.id,
        SummaryStatus.FAILED.value,
        description=fallback,
        only_if=only_if.value,
        attempt=knowledge.attempt,
        not_written_after=not_written_after,
        occurrence=occurrence,
    ):
        return False
    summary_changed(deps, knowledge, EventType.SUMMARY_FAILED, SummaryStatus.FAILED.value, occurrence)
    return True


#: chunks read a page at a time to find the first text chunk (a sweep must not hold a big document's chunks)
FIRST_TEXT_PAGE = 100


def _first_text(deps: Dependencies, knowledge: Knowledge) -> list[str]:
    """The first text chunk's content of the attempt (chunk-id order is document order), read a page at a
    time; [] when it has none."""
    for page in attempt_chunk_pages(deps, knowledge, limit=FIRST_TEXT_PAGE):
        texts = summarised_chunks(page)[ChunkType.TEXT]
        if texts:
            return [texts[0].content]
    return []
