"""Issue 27: locally a stage's Lambda duration estimate is the work (its thread's CPU time plus what it
handed to worker and child processes), not the waiting a loaded machine adds; on AWS it is the duration."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib.adapters.memory import MemoryUsageRepo
from chalicelib.domain import metering
from chalicelib.services.usage import metered_invocation
from chalicelib.settings import load_settings


def _gb_seconds(env: dict[str, str], work: Any) -> float:
    """What one invocation of 1 GB doing `work` is metered (GB-seconds, so seconds)."""
    deps: Any = SimpleNamespace(settings=load_settings(env), usage=MemoryUsageRepo())
    record = SQSRecord({"messageId": "m-1", "body": "{}", "attributes": {"ApproximateReceiveCount": "1"}})
    one_gb = SimpleNamespace(memory_limit_in_mb=1024)
    with metered_invocation(deps, "chunking", "k1", 1, record, {"Records": [record.raw_event]}, one_gb):
        work()
    (entry,) = deps.usage.for_knowledge("k1")
    return float(entry.counts.get(metering.LAMBDA_GB_SECONDS, 0.0))


def test_locally_waiting_is_not_metered_but_handed_off_work_is() -> None:
    def wait_then_hand_off() -> None:
        time.sleep(0.4)  # a loaded machine, a slow emulator: waiting
        metering.record_offloaded(0.25)  # an embedding worker's CPU time for this invocation
        with metering.child_process():
            time.sleep(0.1)  # a LibreOffice conversion the invocation waits for

    seconds = _gb_seconds({}, wait_then_hand_off)
    assert 0.35 <= seconds < 0.45  # 0.25 + 0.1 + the thread's own (tiny) CPU time, not the 0.4 s sleep


def test_on_lambda_the_duration_is_metered() -> None:
    seconds = _gb_seconds({"AWS_LAMBDA_FUNCTION_NAME": "weknora-chunking"}, lambda: time.sleep(0.3))
    assert seconds >= 0.3
