"""Issue 11 through the public path and the moto state machine: the exact plan and count, every subtask
once, captions, an indexed summary, generated questions, the graph, the wiki, table summaries, and settings
that cannot be honoured refused up front. Models are a scripted OpenAI-compatible server (real wire
format, real adapters, the SSRF-safe transport)."""

from __future__ import annotations

import base64
import io
import json
from collections import Counter
from typing import Any

import boto3
import pytest
from scripted_llm import CHAT, VISION, ScriptedLLM

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api, hold_in_finalizing


def _png(colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (120, 90), colour).save(buffer, "PNG")
    return buffer.getvalue()


def _document() -> bytes:
    """45 text chunks (at 300 runes), a table and three images."""
    parts = ["# Harbour handbook\n"]
    for i in range(45):
        parts.append(
            f"## Section {i}\n\nBerth {i} of the Northgate harbour handles Vessel{i} cargo. "
            + "Pilots guide ships past the breakwater. " * 4
        )
    parts.append("| berth | crane |\n|---|---|\n| 1 | Liebherr |\n| 2 | Konecranes |")
    for n, colour in enumerate(((200, 80, 20), (20, 80, 200), (20, 200, 80))):
        parts.append(f"![figure {n}](data:image/png;base64,{base64.b64encode(_png(colour)).decode()})")
    return "\n\n".join(parts).encode()


def _spans(api: Api, knowledge_id: str) -> dict[str, Any]:
    return dict(api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"])


def _search(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 10})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def _executions(services: Services, knowledge_id: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    arn = services.workflow.state_machine_arn  # type: ignore[attr-defined]
    return [
        e
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
        if e["name"].startswith(knowledge_id)
    ]


def _succeeded_subtasks(services: Services, execution_arn: str) -> int:
    sfn = boto3.client("stepfunctions")
    events = sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
    return sum(1 for e in events if e["type"] == "TaskSucceeded" and "enrichment" in json.dumps(e).lower())


def test_every_enrichment_once_with_an_exact_count(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(
        summary_model_id=CHAT,
        vlm_model_id=VISION,
        chunking_config={"chunk_size": 300, "chunk_overlap": 0},
        indexing_strategy={"graph_enabled": True, "wiki_enabled": True},
        enrichment={"enable_multimodel": True, "questions_enabled": True, "question_count": 2},
    )
    created = api.upload(kb["id"], "harbour.md", _document()).json_body["data"]
    table = api.upload(
        kb["id"], "ferries.csv", b"route,departs,arrives\nNorth,08:00,09:10\nSouth,09:30,10:05\n"
    )
    runtime.drain(timeout=600)

    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed" and row["pending_subtasks_count"] == 0
    planned = row["enrichment"]["planned"]
    text_chunks = [c for c in services.chunks.list(created["id"]) if c.chunk_type.value == "text"]
    assert 41 <= len(text_chunks) <= 60  # about 45: three windows of 20
    counts = Counter(p.split(".")[0] for p in planned)
    assert counts == {"summary": 1, "questions": 3, "graph": 3, "wiki": 1}, planned
    postprocess = next(s for s in _spans(api, created["id"])["trace"] if s["span_id"] == "postprocess")
    assert sorted(c["span_id"] for c in postprocess["children"]) == sorted(
        f"postprocess.{p}" for p in planned
    )
    assert all(c["status"] == "done" for c in postprocess["children"])
    kinds = Counter(llm.kinds())
    asked = [
        r for r in llm.requests if r["kind"] == "questions" and r["user"].startswith("Document: harbour.md")
    ]
    assert len(asked) == len(text_chunks)  # one question call per text chunk, none twice
    assert kinds["summary"] >= 1 and kinds["wiki"] == 2  # the handbook and the timetable
    assert kinds["caption"] == 3  # one caption per image, none twice
    [execution] = _executions(services, created["id"])
    assert execution["status"] == "SUCCEEDED"

    images = [c for c in services.chunks.list(created["id"]) if c.chunk_type.value == "image_caption"]
    assert len(images) == 3 and all(c.parent_chunk_id for c in images)
    assert any(
        h["knowledge_id"] == created["id"] and "summary" in h["content"].lower()
        for h in _search(api, kb["id"], "scripted summary covers")
    )
    question = text_chunks[7].metadata["questions"][0]  # kept in the chunk's metadata
    token = next(word for word in question.split() if word.startswith("qtok"))
    hits = _search(api, kb["id"], f"{token} detail")
    assert text_chunks[7].id in [h["chunk_id"] for h in hits[:3]]  # a matching question returns its chunk
    assert any("kiln" in h["content"] for h in _search(api, kb["id"], "orange kiln glowing pottery studio"))
    assert any("wikipage" in h["content"] for h in _search(api, kb["id"], "harbour.md wikipage"))
    assert table.status_code == 200
    assert any(
        "ferries" in h["content"].lower() for h in _search(api, kb["id"], "timetable of harbour ferries")
    )
    graph = api.get(f"/knowledge-bases/{kb['id']}/graph?entity=Berth").json_body["data"]
    assert graph["entity"]["name"] == "Berth" and graph["relations"]
    wiki = api.get(f"/knowledge-bases/{kb['id']}/wiki").json_body["data"]
    assert "harbour.md wikipage" in wiki["index"]


def test_duplicate_callbacks_and_a_second_start_leave_the_count_exact(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(summary_model_id=CHAT, enrichment={"questions_enabled": True})
    runtime.inject_duplicates(True)  # every message, task callbacks included, is delivered twice
    created = api.upload(
        kb["id"], "ferry.md", b"# Ferry\n\n" + b"The North ferry leaves Harbourside at eight. " * 30
    ).json_body["data"]
    runtime.drain(timeout=300)
    runtime.inject_duplicates(None)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed" and row["pending_subtasks_count"] == 0
    again = services.workflow.start(f"{created['id']}-1", {"knowledge_id": created["id"]})
    assert not again.started  # the execution name is the (knowledge, attempt): a repeat is a no-op
    runtime.drain(timeout=60)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    assert len(_executions(services, created["id"])) == 1


def test_a_superseded_attempts_late_callback_changes_nothing(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(summary_model_id=CHAT, enrichment={"questions_enabled": True})
    created = api.upload(
        kb["id"], "ferry.md", b"# Ferry\n\n" + b"The North ferry leaves Harbourside. " * 40
    ).json_body["data"]
    hold_in_finalizing(api, runtime, created["id"])  # attempt 1's enrichment work stays queued
    assert api.post(f"/knowledge/{created['id']}/reparse").status_code == 200  # attempt 2 supersedes
    runtime.drain(timeout=300)
    row = api.knowledge(created["id"])
    assert row["attempt"] == 2 and row["parse_status"] == "completed" and row["pending_subtasks_count"] == 0
    statuses = {e["name"]: e["status"] for e in _executions(services, created["id"])}
    assert statuses[f"{created['id']}-2"] == "SUCCEEDED"


def test_an_image_upload_with_only_a_vision_model_is_searchable_by_its_caption(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    services.replace_ocr_asr(None, None)  # no OCR engine: only the vision model can read the image
    kb = api.create_kb(vlm_model_id=VISION)
    created = api.upload(kb["id"], "kiln.png", _png((240, 120, 30)))
    assert created.status_code == 200, created.json_body
    runtime.drain(timeout=180)
    knowledge_id = created.json_body["data"]["id"]
    assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    hits = _search(api, kb["id"], "orange kiln glowing pottery studio")
    assert hits and hits[0]["knowledge_id"] == knowledge_id


@pytest.mark.requires_tesseract  # enable_multimodel is refused without an OCR engine or a vision model
def test_without_a_vision_model_captions_are_skipped_and_the_span_says_why(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb(enrichment={"enable_multimodel": True})
    body = b"# Notes\n\nsome text\n\n![x](data:image/png;base64," + base64.b64encode(_png((1, 2, 3))) + b")\n"
    created = api.upload(kb["id"], "notes.md", body).json_body["data"]
    runtime.drain(timeout=180)
    multimodal = next(s for s in _spans(api, created["id"])["trace"] if s["span_id"] == "multimodal")
    [image] = multimodal["children"]
    assert "no vision model" in image["outputs"]["image_caption_skipped"]


def test_without_a_chat_model_llm_work_is_not_planned_and_the_row_says_so(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "n.md", b"# N\n\nplain notes about harbour cranes").json_body["data"]
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed" and row["enrichment"]["planned"] == ["summary"]
    assert row["summary_status"] == "completed"  # the offline extractive summary


@pytest.mark.parametrize(
    ("kb_settings", "upload_config"),
    [
        ({"enrichment": {"questions_enabled": True}}, None),
        ({"indexing_strategy": {"graph_enabled": True}}, None),
        ({"indexing_strategy": {"wiki_enabled": True}}, None),
        ({}, {"ocr_engine": "vlm"}),
        ({}, {"question_generation": {"enabled": True}}),
    ],
)
def test_a_setting_that_cannot_be_honoured_is_a_400(
    api: Api, kb_settings: dict[str, Any], upload_config: dict[str, Any] | None
) -> None:
    if upload_config is None:
        response = api.post("/knowledge-bases", {"name": "cannot", **kb_settings})
    else:
        kb = api.create_kb()
        response = api.upload(kb["id"], "a.md", b"# A\n\ntext", {"process_config": json.dumps(upload_config)})
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == "setting_cannot_be_honoured"


def test_a_model_that_rejects_a_subtask_releases_its_slot(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    llm.fail_kinds = {"questions"}
    kb = api.create_kb(summary_model_id=CHAT, enrichment={"questions_enabled": True})
    created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body["data"]
    runtime.drain(timeout=300)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed" and row["pending_subtasks_count"] == 0
    postprocess = next(s for s in _spans(api, created["id"])["trace"] if s["span_id"] == "postprocess")
    failed = [c for c in postprocess["children"] if c["status"] == "failed"]
    assert [c["span_id"] for c in failed] == ["postprocess.questions.0"]
    assert "scripted failure" not in json.dumps(postprocess)  # the provider's text never travels on


def test_summary_refresh_and_the_refresh_after_an_edit(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(summary_model_id=CHAT)
    created = api.upload(kb["id"], "f.md", b"# F\n\nFerries cross the sound at dawn.").json_body["data"]
    runtime.drain(timeout=120)
    before = llm.kinds().count("summary")
    refreshed = api.post(f"/knowledge/{created['id']}/summary/refresh")
    assert refreshed.status_code == 202 and refreshed.json_body["data"]["summary_status"] == "pending"
    runtime.drain(timeout=120)
    assert llm.kinds().count("summary") == before + 1
    assert api.knowledge(created["id"])["summary_status"] == "completed"
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    api.client.http.put(
        f"/api/v1/knowledge/{created['id']}", headers=headers, body='{"title": "Sound ferries"}'
    )
    runtime.drain(timeout=120)
    assert llm.kinds().count("summary") == before + 2


def _entered(execution_arn: str) -> Counter[str]:
    sfn = boto3.client("stepfunctions")
    events = sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
    return Counter(
        e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")
    )


def test_a_subtask_that_answers_a_failure_has_its_slot_released_by_the_machine(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    """Workers release their own slots on success; a failure answer (here the wiki, whose model rejects the
    request) leaves the slot to RunSubtask's Catch: ReleaseSlot, then PromoteIfLast. Whichever of the two
    subtasks ends last, the row completes with every slot released once."""
    llm.fail_kinds = {"wiki"}
    kb = api.create_kb(summary_model_id=CHAT, indexing_strategy={"wiki_enabled": True})
    created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body["data"]
    runtime.drain(timeout=300)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed" and row["pending_subtasks_count"] == 0
    assert sorted(row["enrichment"]["planned"]) == ["summary", "wiki"]
    done = services.knowledge.model.get(created["id"]).done_subtasks  # type: ignore[attr-defined]
    assert set(done) == {"summary", "wiki"}
    [execution] = _executions(services, created["id"])
    assert execution["status"] == "SUCCEEDED"
    entered = _entered(execution["executionArn"])
    assert entered["RunSubtask"] == 2 and entered["ReleaseSlot"] == 1 and entered["PromoteIfLast"] == 1
    for state in ("AnythingPlanned", "SetFinalizing", "Promote"):
        assert state not in entered
    postprocess = next(s for s in _spans(api, created["id"])["trace"] if s["span_id"] == "postprocess")
    assert {c["span_id"]: c["status"] for c in postprocess["children"]} == {
        "postprocess.summary": "done",
        "postprocess.wiki": "failed",
    }


def test_captions_follow_the_description_language_and_custom_instructions(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    """The specification's DescriptionLanguage and CustomInstructions (issue 24): the knowledge base's, and an
    upload's that override them (blank ones inherit)."""
    services.replace_ocr_asr(None, None)
    kb = api.create_kb(
        vlm_model_id=VISION,
        enrichment={"caption_language": "French", "caption_instructions": "Name every colour you see."},
    )
    assert kb["enrichment"]["caption_language"] == "French"
    assert api.upload(kb["id"], "kiln.png", _png((240, 120, 30))).status_code == 200
    override = {"process_config": json.dumps({"caption_language": "German"})}
    assert api.upload(kb["id"], "vase.png", _png((20, 60, 200)), override).status_code == 200
    runtime.drain(timeout=180)
    prompts = sorted(r["user"] for r in llm.requests if r["kind"] == "caption")
    assert len(prompts) == 2
    assert any("in French." in p and "Name every colour you see." in p for p in prompts)
    assert any("in German." in p and "Name every colour you see." in p for p in prompts)
    refused = api.post(
        "/knowledge-bases", {"name": "no-vision", "enrichment": {"caption_language": "French"}}
    )
    assert refused.status_code == 400 and refused.json_body["error"]["code"] == "setting_cannot_be_honoured"
    too_long = api.post(
        "/knowledge-bases",
        {"name": "long", "vlm_model_id": VISION, "enrichment": {"caption_instructions": "x" * 1001}},
    )
    assert too_long.status_code == 400 and too_long.json_body["error"]["code"] == "invalid_enrichment"


def test_a_document_disabled_while_it_is_enriched_stays_out_of_search_with_its_questions(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    """Entries enrichment adds after the switch (generated questions here; image text and the summary take
    the same path) are written disabled, as the document is."""
    from chalicelib.ports import IndexSpace

    kb = api.create_kb(summary_model_id=CHAT, enrichment={"questions_enabled": True})
    created = api.upload(
        kb["id"], "ferry.md", b"# Ferry\n\n" + b"The North ferry leaves Harbourside at eight. " * 30
    ).json_body["data"]
    hold_in_finalizing(api, runtime, created["id"])  # its questions are still to be written
    switched = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps({"enable_status": "disabled"}),
    )
    assert switched.status_code == 200
    runtime.drain(timeout=300)
    row = api.knowledge(created["id"])
    assert (row["parse_status"], row["enable_status"]) == ("completed", "disabled")
    asked = [c for c in services.chunks.list(created["id"]) if c.metadata.get("questions")]
    assert asked
    question = asked[0].metadata["questions"][0]
    assert not [h for h in _search(api, kb["id"], question) if h["knowledge_id"] == created["id"]]
    stored = services.kbs.get(kb["id"])
    assert stored is not None
    space = IndexSpace.of(services.embedding_model(stored.embedding_model_id))
    entries = services.engine(stored.retrieval_engine).entries_of(space, kb["id"], created["id"])
    assert [e.id for e in entries if e.source_type == "question" and e.is_enabled] == []
