"""Step Functions' `$$.State.EnteredTime` (what knowledge.asl.json writes as a row's `updated_at`) drops a zero
millisecond part: `…:06Z`, not `…:06.000Z`, and `Z` sorts after `.`. Housekeeping's conditional writes on
the row as it read it (`not_written_after`: the time read back, written by to_iso as `…:06.000Z`) never held
for such a row, so one stuck at a whole second was never failed (DynamoDB on moto)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from service.repo_contract import row

from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import Knowledge, ParseStatus, SummaryStatus


def _stored_by_the_state_machine(services: Services, knowledge: Knowledge) -> Knowledge:
    """The row with `updated_at` as EnteredTime writes a whole second; read back as housekeeping reads it."""
    second = datetime(2003, 1, 1, tzinfo=UTC) + timedelta(seconds=uuid.uuid4().int % 10**7)
    repo = services.knowledge
    m = repo.model  # type: ignore[attr-defined]
    m(knowledge.id).update(actions=[m.updated_at.set(to_iso(second).replace(".000Z", "Z"))])
    read = repo.get(knowledge.id)
    assert read is not None and to_iso(read.updated_at).endswith(".000Z")
    return read


def _summary_failed(services: Services, read: Knowledge) -> bool:
    return services.knowledge.set_summary_status(
        read.id,
        SummaryStatus.FAILED.value,
        only_if=SummaryStatus.PROCESSING.value,
        attempt=read.attempt,
        not_written_after=to_iso(read.updated_at),
    )


def _row_failed(services: Services, read: Knowledge) -> bool:
    return services.knowledge.mark_failed(
        read.id, read.attempt, "stuck", SpanErrorCode.TASK_TIMEOUT, not_written_after=to_iso(read.updated_at)
    )


def _delete_redriven(services: Services, read: Knowledge) -> bool:
    return services.knowledge.restart_delete_wait(
        read.id, to_iso(datetime.now(UTC)), not_written_after=to_iso(read.updated_at)
    )


@pytest.mark.parametrize(
    ("status", "write"),
    [
        (ParseStatus.COMPLETED, _summary_failed),
        (ParseStatus.FINALIZING, _row_failed),
        (ParseStatus.DELETING, _delete_redriven),
    ],
)
def test_a_row_the_state_machine_wrote_at_a_whole_second_is_housekeepings_to_change(
    module_services: Services, status: ParseStatus, write: Callable[[Services, Knowledge], bool]
) -> None:
    knowledge = row(parse_status=status, summary_status=SummaryStatus.PROCESSING)
    module_services.knowledge.insert(knowledge)
    read = _stored_by_the_state_machine(module_services, knowledge)
    assert write(module_services, read)
