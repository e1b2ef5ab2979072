"""Which parse-status transitions are allowed from where: one home for the rules every repository
(DynamoDB, the in-memory fake) and the state machine's conditional writes enforce."""

from __future__ import annotations

from chalicelib.domain.types import IN_FLIGHT_STATUSES, ParseStatus

#: a worker may (re)start a stage of this attempt
BEGIN_PROCESSING_FROM = frozenset({ParseStatus.PENDING, ParseStatus.PROCESSING})
#: embedding finished: enable the document (it stays processing until enrichment is planned)
MARK_INDEXED_FROM = frozenset({ParseStatus.PROCESSING})
#: a stage's last try, housekeeping or the dead-letter path fails the row
FAIL_FROM = IN_FLIGHT_STATUSES
#: a reparse starts a new attempt from anything but drafts and rows being deleted
REPARSE_FROM = frozenset(
    {
        ParseStatus.PENDING,
        ParseStatus.PROCESSING,
        ParseStatus.FINALIZING,
        ParseStatus.COMPLETED,
        ParseStatus.FAILED,
        ParseStatus.CANCELLED,
    }
)


def holds_dedupe_claim(status: ParseStatus) -> bool:
    """Failed rows do not block a new upload of the same content (the specification's rule)."""
    return status != ParseStatus.FAILED


def is_in_flight(status: ParseStatus) -> bool:
    """In flight rows carry the sparse `inflight` marker housekeeping queries."""
    return status in IN_FLIGHT_STATUSES


#: a delete may start from any state; a second delete of a row already being deleted is a no-op
DELETE_FROM = frozenset(ParseStatus) - {ParseStatus.DELETING}
#: cancel stops a document on its way (spec §1.23); a finished or failed one has nothing to stop
CANCEL_FROM = frozenset({ParseStatus.PENDING, ParseStatus.PROCESSING, ParseStatus.FINALIZING})


def may_write(status: ParseStatus) -> bool:
    """A stage may keep writing for a row that is processing, finalizing or (a summary refresh, a tag)
    completed; not for one being deleted or cancelled: cancel keeps what was written, delete removes it."""
    return status in (ParseStatus.PROCESSING, ParseStatus.FINALIZING, ParseStatus.COMPLETED)
