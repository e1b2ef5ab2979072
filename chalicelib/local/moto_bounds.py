"""moto's memory bounded under a long local run (issue 27): private internals of moto, applied only through
`moto_patches.speed_up_moto` on the moto version it pins.

moto 5.2.5 keeps, for ever:
- every model object it ever created (`BaseModel.instances_tracked`, for its dashboard): every DynamoDB
  item, and every copy of one a GetItem, Query or UpdateItem answered with, every SQS message, every
  Step Functions object. Here only S3's keys and multipart uploads are tracked (moto's reset disposes of
  their temporary files through that list); the rest is freed when moto lets go of it;
- every receipt handle of every message an SQS queue ever deleted (`Queue.deleted_messages`, so that a
  second delete of the same message succeeds); here a queue remembers the most recent `RECENT_RECEIPTS`;
- every Step Functions execution with its whole interpreter environment (frames, states, callback pools,
  event history). Here a finished execution keeps its full environment only while it is among the
  `FULL_FINISHED` most recently finished; after that it keeps what the API still answers about it: its
  status, dates, input, output, error, and its event history (what `get_execution_history` returns, which
  the pipeline reads to count state transitions), the history in the process's item file on disk
  (`moto_items`), not in memory; the rest of the interpreter is dropped, and its copy of the state machine
  is shared with the other executions of the same revision;
- every thread any execution ever started (`moto.stepfunctions.parser.utils.TMP_THREADS`: the program, each
  task's timeout thread, each Map worker, each callback waiter; ~16 a document here), finished or not: a
  list moto appends to and never reads. Here it holds only the threads still running, pruned each time an
  execution ends (a finished thread is ~1.3 KB: its events, locks and excepthook closure).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Any

from chalicelib.local.moto_items import ItemFile, item_file

#: receipt handles of deleted messages each queue remembers (a delete repeated later than that fails)
RECENT_RECEIPTS = 20_000
#: finished executions (per process) that keep their whole interpreter environment
FULL_FINISHED = 64


class RecentReceipts:
    """A set of receipt handles that forgets the oldest beyond `limit` (what moto's set is used as)."""

    def __init__(self, limit: int = RECENT_RECEIPTS) -> None:
        self.limit = limit
        self._handles: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, handle: object) -> bool:
        return handle in self._handles

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self) -> Any:
        return iter(self._handles)

    def add(self, handle: str) -> None:
        self._handles[handle] = None
        self._handles.move_to_end(handle)
        while len(self._handles) > self.limit:
            self._handles.popitem(last=False)

    def update(self, handles: Iterable[str]) -> None:
        for handle in handles:
            self.add(handle)

    def clear(self) -> None:
        self._handles.clear()


class _NoCallbacks:
    """A finished execution waits for no task token and runs no map."""

    def notify(self, callback_id: Any, outcome: Any) -> bool:
        return False

    def heartbeat(self, callback_id: Any) -> bool:
        return False

    def get(self, arn: Any) -> None:
        return None

    def get_all(self) -> list[Any]:
        return []


class _KeptHistory:
    """A finished execution's event history, kept in the moto process's item file, not in memory."""

    def __init__(self, events: list[Any]) -> None:
        file = item_file()
        self._key = file.keep(events)
        weakref.finalize(self, _let_go_quietly, file, self._key)

    def get_event_history(self) -> list[Any]:
        return list(item_file().kept(self._key))


def _let_go_quietly(file: ItemFile, key: int) -> None:
    with contextlib.suppress(sqlite3.Error):  # the process is ending and the file already closed
        file.let_go(key)


class _FinishedEnvironment:
    def __init__(self, events: list[Any]) -> None:
        self.event_manager = _KeptHistory(events)
        self.callback_pool_manager = _NoCallbacks()
        self.map_run_record_pool_manager = _NoCallbacks()


class FinishedWorker:
    """What stays of a finished execution's interpreter: its history."""

    def __init__(self, events: list[Any]) -> None:
        self.env = _FinishedEnvironment(events)

    def stop(self, stop_date: Any, error: Any, cause: Any) -> None:
        return None  # it has stopped already


class FinishedExecutions:
    """The most recently finished executions, oldest first; older ones are slimmed down."""

    def __init__(self, keep_full: int = FULL_FINISHED) -> None:
        self.keep_full = keep_full
        self._recent: deque[Any] = deque()
        self._lock = threading.Lock()

    def finished(self, execution: Any) -> None:
        with self._lock:
            self._recent.append(execution)
            while len(self._recent) > self.keep_full:
                slim(self._recent.popleft())


#: one copy of each state machine revision for every slimmed execution that ran it
_revisions: dict[tuple[Any, ...], Any] = {}


def slim(execution: Any) -> None:
    worker = execution.exec_worker
    if worker is None or isinstance(worker, FinishedWorker) or execution.status == "RUNNING":
        return
    env = worker.env
    events = env.event_manager.get_event_history() if env is not None else []
    execution.exec_worker = FinishedWorker(events)
    # moto gives every execution a deep copy of its state machine (definition and all); the copies of one
    # revision are equal and only read once the execution is over: they can be one object
    machine = execution.state_machine
    revision = (
        machine.arn,
        machine.definition,
        getattr(machine, "revision_id", None),
        getattr(machine, "roleArn", None),
        str(getattr(machine, "create_date", "")),
    )
    execution.state_machine = _revisions.setdefault(revision, machine)


finished_executions = FinishedExecutions()


def forget_finished_threads(threads: list[threading.Thread]) -> None:
    """Drops the finished threads from moto's list of every thread (in place: moto's modules share it). A
    thread appended while this runs may be left out: harmless, nothing reads the list, and a running
    thread is held by `threading` itself."""
    threads[:] = [thread for thread in threads if thread.is_alive()]


#: the model classes whose instances moto still tracks (module, class name)
STILL_TRACKED = {("moto.s3.models", "FakeKey"), ("moto.s3.models", "FakeMultipart")}


def untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    """`BaseModel.__new__` without the list of every instance ever made (but for `STILL_TRACKED`)."""
    instance: Any = object.__new__(cls)
    if (cls.__module__, cls.__name__) in STILL_TRACKED:
        cls.instances_tracked.append(instance)  # type: ignore[attr-defined]
    return instance


_installed = False


def install() -> None:
    """Once per process (the caller has checked the moto version)."""
    global _installed
    if _installed:
        return
    from moto.core.common_models import BaseModel
    from moto.sqs.models import Queue
    from moto.stepfunctions.parser import utils as stepfunctions_utils
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

    queue_init = Queue.__init__

    def init_with_recent_receipts(self: Any, *args: Any, **kwargs: Any) -> None:
        queue_init(self, *args, **kwargs)
        self.deleted_messages = RecentReceipts()

    terminated = BaseExecutionWorkerCommunication.terminated

    def terminated_then_kept_small(self: Any) -> None:
        terminated(self)
        finished_executions.finished(self.execution)
        forget_finished_threads(stepfunctions_utils.TMP_THREADS)

    BaseModel.__new__ = staticmethod(untracked_new)  # type: ignore[method-assign]
    Queue.__init__ = init_with_recent_receipts  # type: ignore[method-assign]
    BaseExecutionWorkerCommunication.terminated = terminated_then_kept_small  # type: ignore[method-assign]
    _installed = True
