"""Issue 27: locally a stage's Lambda duration estimate is the work (its thread's CPU time plus what it
handed to worker and child processes), not the waiting a loaded machine adds; on AWS it is the duration."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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


#: a child that works (CPU-bound for ~0.3 s) and one that only waits (0.5 s asleep)
BUSY_CHILD = [
    sys.executable,
    "-c",
    "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
]
IDLE_CHILD = [sys.executable, "-c", "import time; time.sleep(0.5)"]


def _child_seconds(command: list[str]) -> float:
    with metering.metering() as meter, metering.child_process():
        subprocess.run(command, check=True)
    return meter.offloaded_seconds


def test_locally_waiting_is_not_metered_but_handed_off_work_is() -> None:
    def wait_then_hand_off() -> None:
        time.sleep(0.4)  # a loaded machine, a slow emulator: waiting
        metering.record_offloaded(0.25)  # an embedding worker's CPU time for this invocation

    seconds = _gb_seconds({}, wait_then_hand_off)
    assert 0.25 <= seconds < 0.3  # 0.25 + the thread's own (tiny) CPU time, not the 0.4 s sleep


def test_a_child_process_is_metered_by_its_cpu_time_not_its_run_time() -> None:
    busy, idle = _child_seconds(BUSY_CHILD), _child_seconds(IDLE_CHILD)
    assert busy >= 0.3  # its 0.3 s of work (and the interpreter's start)
    assert idle < 0.3  # the interpreter's start, not the 0.5 s it slept


def test_children_on_several_threads_are_counted_once_in_all() -> None:
    def one() -> float:
        return _child_seconds(BUSY_CHILD)

    with ThreadPoolExecutor(max_workers=3) as pool:
        shares = list(pool.map(lambda _: one(), range(3)))
    alone = one()
    # each child's CPU time goes to one scope: the sum is three children's, not each scope seeing them all
    assert sum(shares) < 3 * alone * 1.6


def test_a_pool_threads_cpu_time_counts_for_the_invocation_that_submitted_it() -> None:
    def burn() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    with metering.metering() as meter, ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(metering.thread_work(burn)).result()
        pool.submit(time.sleep, 0.2).result()  # not wrapped: not this invocation's work
    assert 0.2 <= meter.offloaded_seconds < 0.3


def test_on_lambda_the_duration_is_metered() -> None:
    seconds = _gb_seconds({"AWS_LAMBDA_FUNCTION_NAME": "weknora-chunking"}, lambda: time.sleep(0.3))
    assert seconds >= 0.3
