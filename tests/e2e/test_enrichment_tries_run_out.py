"""On moto's state machine: an enrichment subtask whose model answers 5xx until its tries run out. The
document completes (a subtask never fails its document), and its trace says which subtask failed, with a
stable code and none of the server's words; the summary gets its failure rule at once (spec §1.13)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.stages import runner

from .conftest import Api

MARK = "SERVERWORDS"


class Overloaded(ScriptedLLM):
    """Answers 503 to the questions and the summary; the rest as scripted."""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = super().answer(body)
        if self.requests[-1]["kind"] in ("questions", "summary"):
            return 503, {"error": {"message": f"{MARK} overloaded"}}
        return status, payload


@pytest.fixture
def llm(services: Services) -> Iterator[ScriptedLLM]:
    with Overloaded() as scripted:
        use_models(services, scripted)
        yield scripted


def test_subtasks_whose_tries_run_out_are_failed_on_their_spans(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "RETRY_BASE_SECONDS", 1)
    monkeypatch.setattr(runner, "RETRY_MAX_SECONDS", 1)
    services.settings = replace(services.settings, max_throttle_deferrals=0)
    kb = api.create_kb(summary_model_id=CHAT, enrichment={"questions_enabled": True})
    created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body["data"]
    runtime.drain(timeout=300)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "completed", row
    assert row["summary_status"] == "failed"
    assert row["description"] and "Ferries cross the sound." in row["description"]
    trace = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]["trace"]
    [post] = [s for s in trace if s["span_id"] == "postprocess"]
    children = {c["span_id"]: c for c in post.get("children", [])}
    for span_id in ("postprocess.summary", "postprocess.questions.0"):
        assert span_id in children, children.keys()
        assert children[span_id]["status"] == "failed"
        assert children[span_id]["error_code"] == "unknown"
    assert MARK not in json.dumps([row, trace])
