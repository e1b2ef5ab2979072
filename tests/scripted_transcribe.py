"""Amazon Transcribe's batch-job API as a script, for tests that cannot reach the service, and a small WAV.

A job runs through `statuses`, one per GetTranscriptionJob; on COMPLETED the script does what the service
does (writes the transcript JSON to OutputBucketName/OutputKey, here through a FileStore) and answers an
https TranscriptFileUri, virtual-hosted or path-style, that nothing may fetch."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.ports import FileStore


def wav(seconds: float = 1.0, rate: int = 8000) -> bytes:
    """A silent 16-bit mono WAV (the reader sniffs it as audio)."""
    data = b"\x00\x00" * int(seconds * rate)
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


def client_error(code: str, message: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class FakeClock:
    """Monotonic time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class ScriptedTranscribe:
    class exceptions:  # the shape of a boto3 client's `exceptions`
        ClientError = ClientError

    def __init__(
        self,
        store: FileStore,
        *,
        statuses: Sequence[str] = ("QUEUED", "IN_PROGRESS", "COMPLETED"),
        transcript: str = "hello from transcribe",
        failure_reason: str = "",
        path_style: bool = False,
        created: datetime | None = None,
        start_errors: Sequence[str] = (),
        write_transcript: bool = True,
        unseen_checks: int = 0,
    ) -> None:
        self.store = store
        self.statuses = list(statuses)
        self.transcript = transcript
        self.failure_reason = failure_reason
        self.path_style = path_style
        self.created = created or datetime.now(UTC)
        self.start_errors = list(start_errors)
        self.write_transcript = write_transcript
        #: status checks answered "not found" although the job exists (a start racing ours)
        self.unseen_checks = unseen_checks
        self.jobs: dict[str, dict[str, Any]] = {}
        self.started: list[dict[str, Any]] = []
        self.checks: list[str] = []
        self.deleted: list[str] = []

    def start_transcription_job(self, **params: Any) -> dict[str, Any]:
        if self.start_errors:
            code = self.start_errors.pop(0)
            raise client_error(code, f"scripted {code}", "StartTranscriptionJob")
        name = params["TranscriptionJobName"]
        if name in self.jobs:
            raise client_error(
                "ConflictException", "The requested job name already exists.", "StartTranscriptionJob"
            )
        self.started.append(params)
        self.jobs[name] = {"params": params, "status": "QUEUED", "script": list(self.statuses)}
        return {"TranscriptionJob": {"TranscriptionJobName": name, "TranscriptionJobStatus": "QUEUED"}}

    def get_transcription_job(self, *, TranscriptionJobName: str) -> dict[str, Any]:
        self.checks.append(TranscriptionJobName)
        job = self.jobs.get(TranscriptionJobName)
        if self.unseen_checks:
            self.unseen_checks -= 1
            job = None
        if job is None:
            raise client_error(
                "BadRequestException",
                "The requested job couldn't be found. Check the job name and try your request again.",
                "GetTranscriptionJob",
            )
        if job["script"]:
            job["status"] = job["script"].pop(0)
        answer: dict[str, Any] = {
            "TranscriptionJobName": TranscriptionJobName,
            "TranscriptionJobStatus": job["status"],
            "CreationTime": self.created,
        }
        params = job["params"]
        bucket, key = params["OutputBucketName"], params["OutputKey"]
        if job["status"] == "COMPLETED":
            if self.write_transcript and not job.get("written"):
                body = {"results": {"transcripts": [{"transcript": self.transcript}], "items": []}}
                self.store.save(key, json.dumps(body).encode(), "application/json")
                job["written"] = True
            host = "s3.us-east-1.amazonaws.com"
            uri = f"https://{host}/{bucket}/{key}" if self.path_style else f"https://{bucket}.{host}/{key}"
            answer["Transcript"] = {"TranscriptFileUri": uri}
        if job["status"] == "FAILED":
            answer["FailureReason"] = self.failure_reason
        return {"TranscriptionJob": answer}

    def delete_transcription_job(self, *, TranscriptionJobName: str) -> None:
        if self.jobs.pop(TranscriptionJobName, None) is None:
            raise client_error(
                "BadRequestException", "The requested job couldn't be found.", "DeleteTranscriptionJob"
            )
        self.deleted.append(TranscriptionJobName)
