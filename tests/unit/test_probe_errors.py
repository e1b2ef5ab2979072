"""The probes housekeeping relies on (a queue's backlog, whether an execution runs), and a send, tell an AWS
service that did not answer (ServiceUnreachable: the caller may treat the fact as unknown) from a refused
call, which stays a ClientError and surfaces. Pinned with botocore's Stubber: moto neither throttles nor
denies."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.adapters.queues import SqsTaskQueue
from chalicelib.adapters.workflow import StepFunctionsWorkflow
from chalicelib.ports import ServiceUnreachable

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:weknora-knowledge"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/weknora-chunking"
KEYS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}

UNANSWERED = [("ThrottlingException", 400), ("RequestThrottled", 403), ("InternalError", 500), ("", 503)]
REFUSED = [("AccessDenied", 403), ("AccessDeniedException", 400), ("QueueDoesNotExist", 400)]


def _sqs(stub: Stubber) -> SqsTaskQueue:
    """The adapter with its queue URL looked up first (the stubbed answers follow in order)."""
    stub.add_response("get_queue_url", {"QueueUrl": QUEUE_URL}, {"QueueName": "weknora-chunking"})
    return SqsTaskQueue(stub.client, {"chunking": "weknora-chunking"})


@pytest.mark.parametrize(
    ("code", "status", "unanswered"),
    [(code, status, True) for code, status in UNANSWERED]
    + [(code, status, False) for code, status in REFUSED],
)
def test_a_backlog_read_tells_an_unanswered_call_from_a_refused_one(
    code: str, status: int, unanswered: bool
) -> None:
    """Unanswered: ServiceUnreachable (the caller may treat the count as unknown); refused: the ClientError."""
    client = boto3.client("sqs", **KEYS)
    with Stubber(client) as stub:
        queue = _sqs(stub)
        stub.add_client_error("get_queue_attributes", service_error_code=code, http_status_code=status)
        with pytest.raises(ServiceUnreachable if unanswered else ClientError) as raised:
            queue.backlog("chunking")
        assert isinstance(raised.value, ServiceUnreachable) == unanswered


@pytest.mark.parametrize(
    ("code", "status", "unanswered"),
    [(code, status, True) for code, status in UNANSWERED]
    + [(code, status, False) for code, status in REFUSED],
)
def test_a_send_tells_an_unanswered_call_from_a_refused_one(code: str, status: int, unanswered: bool) -> None:
    """A caller that can answer "try again" (an FAQ import's start: 503 queue_unavailable) needs to know."""
    client = boto3.client("sqs", **KEYS)
    with Stubber(client) as stub:
        queue = _sqs(stub)
        stub.add_client_error("send_message", service_error_code=code, http_status_code=status)
        with pytest.raises(ServiceUnreachable if unanswered else ClientError) as raised:
            queue.send_raw("chunking", {"task_id": "t1"})
        assert isinstance(raised.value, ServiceUnreachable) == unanswered


def test_an_answered_backlog_read_sums_the_three_counts() -> None:
    client = boto3.client("sqs", **KEYS)
    with Stubber(client) as stub:
        queue = _sqs(stub)
        stub.add_response(
            "get_queue_attributes",
            {
                "Attributes": {
                    "ApproximateNumberOfMessages": "2",
                    "ApproximateNumberOfMessagesNotVisible": "3",
                    "ApproximateNumberOfMessagesDelayed": "1",
                }
            },
        )
        assert queue.backlog("chunking") == 6


@pytest.mark.parametrize(
    ("code", "raised"), [("ThrottlingException", ServiceUnreachable), ("AccessDeniedException", ClientError)]
)
def test_an_execution_probe_tells_an_unanswered_call_from_a_refused_one(
    code: str, raised: type[Exception]
) -> None:
    client = boto3.client("stepfunctions", **KEYS)
    with Stubber(client) as stub:
        stub.add_client_error("describe_execution", service_error_code=code)
        with pytest.raises(raised) as caught:
            StepFunctionsWorkflow(client, ARN).is_running("k1-1")
        assert isinstance(caught.value, ServiceUnreachable) == (raised is ServiceUnreachable)


def test_a_connection_that_failed_is_transient_and_missing_credentials_are_not() -> None:
    from botocore.exceptions import NoCredentialsError

    assert is_transient(EndpointConnectionError(endpoint_url="https://sqs.us-east-1.amazonaws.com"))
    assert not is_transient(NoCredentialsError())


@pytest.mark.parametrize(
    ("code", "status", "unanswered"),
    [(code, status, True) for code, status in UNANSWERED]
    + [(code, status, False) for code, status in REFUSED],
)
def test_a_dead_letter_tells_an_unanswered_call_from_a_refused_one(
    code: str, status: int, unanswered: bool
) -> None:
    """A webhook delivery the queue did not take is parked in its DLQ; a DLQ that does not answer either is
    logged as lost by the caller (services/events.py), where a raw ClientError had failed the upload."""
    client = boto3.client("sqs", **KEYS)
    with Stubber(client) as stub:
        queue = SqsTaskQueue(
            stub.client, {"chunking": "weknora-chunking"}, dead_letter_urls={"chunking": QUEUE_URL + "-dlq"}
        )
        stub.add_client_error("send_message", service_error_code=code, http_status_code=status)
        with pytest.raises(ServiceUnreachable if unanswered else ClientError) as raised:
            queue.dead_letter("chunking", "{}", "parked")
        assert isinstance(raised.value, ServiceUnreachable) == unanswered
