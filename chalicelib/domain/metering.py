"""What one piece of work spends, counted from the calls it really makes.

A stage invocation opens a `Meter`; the AWS adapters (botocore events, `adapters/aws_metering.py`) and the
model adapters add to the meter that is current in their context. The runner then stores the counts as one
usage entry per invocation, attributed to the knowledge (and its knowledge base). Nothing here knows AWS;
the counter names are the units the price table (`pricing.py`) knows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

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
    #: processes, run time of child processes (LibreOffice, tesseract); part of the local duration estimate
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


def record_offloaded(seconds: float) -> None:
    """Work done for the current invocation in another process (see `Meter.offloaded_seconds`)."""
    meter = _current.get()
    if meter is not None and seconds > 0:
        meter.offloaded_seconds += seconds


@contextmanager
def child_process() -> Iterator[None]:
    """Around a child process the invocation waits for: its run time is work done for it (a child's own
    CPU time is not attributable while other threads run children too)."""
    started = time.monotonic()
    try:
        yield
    finally:
        record_offloaded(time.monotonic() - started)


def record_all(counts: Mapping[str, float]) -> None:
    for name, amount in counts.items():
        record(name, amount)


def attribute(kb_id: str, tenant_id: str) -> None:
    """Names the knowledge base and tenant the current work is for (the usage entry carries them)."""
    meter = _current.get()
    if meter is not None:
        meter.kb_id = meter.kb_id or kb_id
        meter.tenant_id = meter.tenant_id or tenant_id


def record_tokens(model_id: str, input_tokens: object, output_tokens: object = 0) -> None:
    """Tokens a provider reported for one call (non-numbers, as a provider may send, count as 0). The
    endpoint part of an id (`openai/x@http://host`) is the operator's, never shown: only the model name."""
    model_id = model_id.split("@", 1)[0]
    for kind, amount in (("input", input_tokens), ("output", output_tokens)):
        if isinstance(amount, int | float) and not isinstance(amount, bool) and amount > 0:
            record(token_counter(kind, model_id), float(amount))
