"""Expired download grants do not pile up: the resources table's DynamoDB TTL is on the attribute the
adapter writes on every grant (`purge_at`, epoch seconds: the grant's expiry plus a margin)."""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime, timedelta

from chalicelib.adapters.dynamo.tables import build_models
from chalicelib.adapters.memory import memory_settings
from chalicelib.domain.resources import GRANT_KEPT_AFTER_EXPIRY, AccessGrant

from .iam_policy import ROOT


def test_the_resources_table_expires_grants_on_the_attribute_the_adapter_writes() -> None:
    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    ttl = template["Resources"]["ResourcesTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "purge_at", "Enabled": True}
    model = build_models(memory_settings()).resource
    assert model is not None and model.purge_at.attr_name == ttl["AttributeName"]


def test_a_grant_is_purged_a_margin_after_it_expires() -> None:
    expires = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
    grant = AccessGrant("h", "resource://x", "t", "download", expires - timedelta(minutes=15), expires)
    assert timedelta(hours=1) <= GRANT_KEPT_AFTER_EXPIRY  # an expired link answers 410, not 404, a while
    assert grant.purge_at == int(expires.timestamp()) + int(GRANT_KEPT_AFTER_EXPIRY.total_seconds())


def test_the_files_bucket_expires_what_a_presigned_upload_leaves_when_it_never_arrives() -> None:
    """An intent is written when a presigned URL is handed out and read when the object arrives; an upload
    that never comes (or was refused: its reason beside it), or a transcription's files a superseded attempt
    left, would otherwise stay for good."""
    from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
    from chalicelib.faq.importing import import_prefix
    from chalicelib.parsers.asr import TRANSCRIBE_KEY_PREFIX, TRANSCRIBED_KEY_PREFIX, TranscribeAsr

    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = {rule["Prefix"]: rule["ExpirationInDays"] for rule in rules if "Prefix" in rule}
    settings = memory_settings()
    written = {
        upload_intent_key("k").split("/")[0] + "/",
        upload_result_key("k").split("/")[0] + "/",
        settings.upload_prefix,
        import_prefix("t", "kb").split("/")[0] + "/",
    }
    # a finished job's text kept for a retry (TRANSCRIBED_KEY_PREFIX) goes if no retry comes for it
    assert written | {TRANSCRIBE_KEY_PREFIX, TRANSCRIBED_KEY_PREFIX} <= set(expiring)
    assert all(expiring[p] * 86_400 > settings.presign_expires_seconds for p in written)
    # a transcription's media copy and transcript: kept past the longest job a worker waits on
    job_seconds = inspect.signature(TranscribeAsr).parameters["max_job_seconds"].default
    assert expiring[TRANSCRIBE_KEY_PREFIX] * 86_400 > job_seconds
