"""Speech on AWS: an audio upload read by Amazon Transcribe, on moto, through the docreader function.

moto's Transcribe moves a job QUEUED -> IN_PROGRESS -> COMPLETED, one step per GetTranscriptionJob, and
answers an https TranscriptFileUri (path-style) but writes no transcript: `TranscribeService` below does
that last step as the service would, into OutputBucketName/OutputKey, with a client of its own (the
service's write is not the function's call). The engine polls for no time per invocation here, so each
status step is a hand-over to a later delivery of the docreader message."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3
import pytest
from scripted_transcribe import wav

from chalicelib.bootstrap import Services, _build_asr
from chalicelib.local.runtime import LocalRuntime
from chalicelib.parsers.asr import TranscribeAsr

from .conftest import Api

SPOKEN = "the harbour horn sounds twice a minute in fog until the lamp is seen"


class TranscribeService:
    """The docreader's Transcribe client, plus what moto leaves out: the transcript written on completion."""

    def __init__(self, client: Any, s3: Any) -> None:
        self.client, self.s3 = client, s3
        self.outputs: dict[str, tuple[str, str]] = {}
        self.locations: list[str] = []
        self.starts = self.checks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def start_transcription_job(self, **params: Any) -> Any:
        self.starts += 1
        self.outputs[params["TranscriptionJobName"]] = (params["OutputBucketName"], params["OutputKey"])
        return self.client.start_transcription_job(**params)

    def get_transcription_job(self, **params: Any) -> Any:
        self.checks += 1
        answer = self.client.get_transcription_job(**params)
        job = answer["TranscriptionJob"]
        if job.get("TranscriptionJobStatus") == "COMPLETED":
            bucket, key = self.outputs[job["TranscriptionJobName"]]
            body = {
                "jobName": job["TranscriptionJobName"],
                "results": {"transcripts": [{"transcript": SPOKEN}]},
            }
            self.s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(body).encode())
            self.locations.append(job["Transcript"]["TranscriptFileUri"])
        return answer


@pytest.fixture
def transcribe(services: Services) -> TranscribeService:
    settings = replace(services.settings, asr_provider="transcribe")
    engine = _build_asr(settings, services.inbox)
    assert isinstance(engine, TranscribeAsr)
    s3 = boto3.client("s3", region_name=settings.region, endpoint_url=settings.aws_endpoint_url or None)
    service = TranscribeService(engine.client, s3)
    engine.client = service
    engine.poll_seconds, engine.poll_budget_seconds, engine.resume_delay_seconds = 0.1, 0, 1
    services.replace_ocr_asr(None, engine)
    return service


def test_audio_is_transcribed_by_amazon_transcribe_and_its_objects_are_deleted(
    api: Api, runtime: LocalRuntime, services: Services, transcribe: TranscribeService
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "fog.wav", wav(2.0))
    assert created.status_code == 200, created.json_body
    knowledge_id = created.json_body["data"]["id"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(knowledge_id)
    assert knowledge["parse_status"] == "completed", knowledge
    assert SPOKEN in " ".join(chunk.content for chunk in services.chunks.list(knowledge_id))
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "harbour horn in fog"})
    assert hits.json_body["data"][0]["knowledge_id"] == knowledge_id  # indexed, not only chunked
    # moto answered an https location of our bucket; the transcript was read from our key all the same
    bucket = services.settings.files_bucket
    assert transcribe.locations and transcribe.locations[0].startswith("https://s3.")
    assert f"/{bucket}/transcribe/" in transcribe.locations[0]
    # not found, QUEUED, IN_PROGRESS (each a hand-over to a later delivery), COMPLETED: one job throughout
    assert (transcribe.starts, transcribe.checks) == (1, 4)
    job = f"{services.settings.prefix}-{knowledge_id}-1"
    with pytest.raises(transcribe.client.exceptions.BadRequestException):
        transcribe.client.get_transcription_job(TranscriptionJobName=job)  # deleted after use
    listed = transcribe.s3.list_objects_v2(Bucket=bucket, Prefix="transcribe/")
    assert listed.get("KeyCount", 0) == 0  # neither the media copy nor the transcript is left
    sqs = boto3.client(
        "sqs", region_name=services.settings.region, endpoint_url=services.settings.aws_endpoint_url
    )
    dlq = sqs.get_queue_url(QueueName=f"{services.settings.queue('docreader')}-dlq")["QueueUrl"]
    depth = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])
    assert depth["Attributes"]["ApproximateNumberOfMessages"] == "0"
