"""What a chat model writes is stored as Markdown a front end shows (the description, the summary chunk, wiki
pages, table descriptions, a chunk's questions): its active HTML (scripts, event handlers) goes before it is
stored, as for every other way text gets in (`domain.markup`). A document can carry such HTML to the model
inside a code span, or ask for it in words; the model's reply was stored as it came."""

from __future__ import annotations

import json

from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, Tenant
from chalicelib.enrich.questions import clean
from chalicelib.enrich.tables import TableSchema, _read
from chalicelib.enrich.wiki import read_pages

from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401

ACTIVE = '<img src="x" onerror="alert(1)"> and <script>alert(2)</script>'


def _inert(text: str) -> bool:
    return "onerror" not in text and "<script" not in text and "alert(2)" not in text


def test_a_summary_keeps_none_of_the_models_active_html(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    llm.replies["summary"] = f"The keeper tends the lamp every night. {ACTIVE} The fog horn sounds at dusk."
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    assert run_subtask(deps, knowledge, "s", planned_subtask("summary")) == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and "The keeper tends the lamp" in row.description
    assert _inert(row.description)
    [chunk] = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.SUMMARY]
    assert "fog horn" in chunk.content and _inert(chunk.content)


def test_wiki_pages_keep_none_of_the_models_active_html() -> None:
    [page] = read_pages(
        [{"title": "Lamp <script>alert(2)</script>", "content": f"# Lamp\n\nIt burns. {ACTIVE}"}]
    )
    assert page.title.startswith("Lamp") and "It burns." in page.content
    assert _inert(page.title) and _inert(page.content)


def test_a_table_description_keeps_none_of_the_models_active_html() -> None:
    schema = TableSchema(columns=[("year", "integer")])
    summary = _read(
        {
            "description": f"Yearly counts. {ACTIVE}",
            "columns": [{"name": "year", "description": f"When. {ACTIVE}"}],
        },
        schema,
    )
    assert summary is not None and summary.description.startswith("Yearly counts.")
    assert _inert(summary.description) and _inert(summary.columns["year"])


def test_questions_keep_none_of_the_models_active_html() -> None:
    reply = "\n".join(
        [
            "1. When is the lamp lit <img src=x onerror=alert(1)>?",
            "<script>",
            "alert(2)",
            "</script>",
            "2. Who keeps the lighthouse at the harbour?",
        ]
    )
    asked = clean(reply, 3)
    assert asked and all(_inert(q) for q in asked), json.dumps(asked)
    assert "Who keeps the lighthouse at the harbour?" in asked


def test_a_summary_of_only_active_html_is_not_made(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    """Nothing is left to show: the summary fails with its fallback description, never an empty one."""
    llm.replies["summary"] = "<script>alert(2)</script>"
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    assert run_subtask(deps, knowledge, "s", planned_subtask("summary")) == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status.value == "failed"
    assert row.description and _inert(row.description)
    assert not [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.SUMMARY]


def test_a_table_description_of_only_active_html_is_no_description() -> None:
    schema = TableSchema(columns=[("year", "integer")])
    assert _read({"description": "<script>alert(2)</script>"}, schema) is None
    summary = _read(
        {"description": "Counts.", "columns": [{"name": "year", "description": "<script>x</script>"}]}, schema
    )
    assert summary is not None and summary.columns == {}
