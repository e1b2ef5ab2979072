"""What one piece of work spends, counted from the calls it really makes.

A stage invocation opens a `Meter`; the AWS adapters (botocore events, `adapters/aws_metering.py`) and the
model adapters add to the meter that is current in their context. The runner then stores the counts as one
usage entry per invocation, attributed to the knowledge (and its knowledge base). Nothing here knows AWS;
the counter names are the units the price table (`pricing.py`) knows.
"""

from __future__ import annotations

import math
import resource
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: counter names (units) used across the adapters and the price table
SQS_REQUESTS = "sqs_requests"
DYNAMODB_READ_UNITS = "dynamodb_read_units"
DYNAMODB_WRITE_UNITS = "dynamodb_write_units"
S3_TIER1_REQUESTS = "s3_tier1_requests"  # PUT, COPY, POST, LIST
S3_TIER2_REQUESTS = "s3_tier2_requests"  # GET, HEAD and the rest
S3_BYTES_IN = "s3_bytes_in"
S3_BYTES_OUT = "s3_bytes_out"
SFN_REQUESTS = "stepfunctions_requests"
SFN_TRANSITIONS = "stepfunctions_transitions"
LAMBDA_GB_SECONDS = "lambda_gb_seconds"
LAMBDA_REQUESTS = "lambda_requests"
TEXTRACT_PAGES = "textract_pages"
TRANSCRIBE_SECONDS = "transcribe_seconds"
OTHER_AWS_REQUESTS = "other_aws_requests"
#: model tokens are kept per model: f"{TOKENS_PREFIX}{kind}:{model_id}"
TOKENS_PREFIX = "tokens_"


def token_counter(kind: str, model_id: str) -> str:
    """`kind` is input or output (embedding inputs count as input)."""
    return f"{TOKENS_PREFIX}{kind}:{model_id}"


@dataclass
class Meter:
    counts: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    #: what the work was for, set once the work has read its row (the runner writes it with the counts)
    kb_id: str = ""
    tenant_id: str = ""
    #: seconds of work done for this invocation outside its own thread: CPU time of the embedding worker
    #: processes, of its pool threads and of child processes (LibreOffice, tesseract); part of the local
    #: duration estimate
    offloaded_seconds: float = 0.0

    def add(self, counter: str, amount: float) -> None:
        if amount:
            self.counts[counter] += amount

    def snapshot(self) -> dict[str, float]:
        return {name: round(value, 6) for name, value in self.counts.items() if value}


_current: ContextVar[Meter | None] = ContextVar("weknora_meter", default=None)


@contextmanager
def metering() -> Iterator[Meter]:
    """Counts everything the enclosed work spends into a fresh meter (nested scopes stay separate)."""
    meter = Meter()
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def current_meter() -> Meter | None:
    return _current.get()


def record(counter: str, amount: float) -> None:
    """Adds to the current meter; outside a metered scope (a request, a test) it is a no-op."""
    meter = _current.get()
    if meter is not None:
        meter.add(counter, amount)


_offloaded_lock = threading.Lock()  # pool threads of one invocation add to its meter at once


def record_offloaded(seconds: float) -> None:
    """Work done for the current invocation in another process or thread (see `Meter.offloaded_seconds`)."""
    meter = _current.get()
    if meter is not None and seconds > 0:
        with _offloaded_lock:
            meter.offloaded_seconds += seconds


def thread_work(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` for a pool thread working for the current invocation: it runs in a copy of the caller's context
    (the meter goes along; a pool thread starts with an empty one) and its thread's CPU time is counted as
    the invocation's work. Wrap at each submission (in the caller's thread): one context per call."""
    context = copy_context()

    def counted(*args: P.args, **kwargs: P.kwargs) -> T:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            record_offloaded(time.thread_time() - started)

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.run(counted, *args, **kwargs)

    return run


def _children_cpu_seconds() -> float:
    """CPU time of every child process this process has waited for (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _ChildrenLedger:
    """Hands out the CPU time of waited-for children to the `child_process` scopes open when they ended.
    The kernel only gives the sum over all children, so each scope takes what no scope has taken yet: the
    total handed out never exceeds the children's CPU time, even with scopes open on several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open_scopes = 0
        self.handed_out = 0.0

    def enter(self) -> None:
        with self.lock:
            if self.open_scopes == 0:  # children that ended outside every scope are nobody's work
                self.handed_out = _children_cpu_seconds()
            self.open_scopes += 1

    def leave(self) -> float:
        with self.lock:
            self.open_scopes -= 1
            share = max(0.0, _children_cpu_seconds() - self.handed_out)
            self.handed_out += share
            return share


_children = _ChildrenLedger()


@contextmanager
def child_process() -> Iterator[None]:
    """Around a child process the invocation runs and waits for (subprocess.run): the child's CPU time
    (and its own children's) is work done for it; its wall time is not, since a loaded machine stretches
    that (issue 27)."""
    _children.enter()
    try:
        yield
    finally:
        record_offloaded(_children.leave())


def record_all(counts: Mapping[str, float]) -> None:
    for name, amount in counts.items():
        record(name, amount)


def attribute(kb_id: str, tenant_id: str) -> None:
    """Names the knowledge base and tenant the current work is for (the usage entry carries them)."""
    meter = _current.get()
    if meter is not None:
        meter.kb_id = meter.kb_id or kb_id
        meter.tenant_id = meter.tenant_id or tenant_id


#: more tokens than any model reads or writes in one call: a count above it is a provider's error
MAX_TOKENS_PER_CALL = 10**9


def shown_model_id(model_id: str) -> str:
    """A model id as a tenant may see it (a span's outputs, a usage line): the provider and model only. The
    endpoint part (`openai/x@http://host/v1#dim=8`) is the operator's: its host, port and parameters."""
    return model_id.split("@", 1)[0]


def record_tokens(model_id: str, input_tokens: object, output_tokens: object = 0) -> None:
    """Tokens a provider reported for one call (non-numbers, as a provider may send, count as 0). A count
    that is not finite (json.loads reads `Infinity` and `NaN`) or above MAX_TOKENS_PER_CALL is ignored
    with a warning: it would reach the usage rows and their cost. Counted under `shown_model_id`."""
    model_id = shown_model_id(model_id)
    for kind, amount in (("input", input_tokens), ("output", output_tokens)):
        if not isinstance(amount, int | float) or isinstance(amount, bool):
            continue
        if not (
            amount <= MAX_TOKENS_PER_CALL and math.isfinite(amount)
        ):  # NaN fails both; a huge int the first
            _warn_implausible(model_id, kind)
        elif amount > 0:
            record(token_counter(kind, model_id), float(amount))


def _warn_implausible(model_id: str, kind: str) -> None:
    from chalicelib.observability import logger  # here: observability imports the domain

    # the model and the kind alone: the count is the provider's (and the id's endpoint part is cut off)
    logger.warning("provider token count ignored", extra={"model": model_id, "kind": kind})
