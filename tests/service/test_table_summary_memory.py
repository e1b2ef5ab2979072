"""The postprocess (plan) task's table summary reads the parsed Markdown as a stream, up to the table's end,
and keeps only the rows it types or samples: what it holds does not grow with the table.

Regression: it read the whole parsed Markdown, decoded it, split it into lines and kept every row's cells,
though the model is shown 10 rows, the types of 200 and the row count. A sheet of 320,000 rows x 10 CJK
columns (35.5 M characters, under the parsers' cap) peaked at 629 MB in the 512 MB plan task: the task died
on every try, the plan was never made, and a document already indexed and searchable failed."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.services.storage import files_of
from chalicelib.stages import postprocess

from .conftest import drain, task_body, upload

ROWS, COLUMNS = 50_000, 10
#: what the read may hold at its peak: a few 1 MB pieces and their lines. The whole read held ~80 MB here.
BOUND = 16_000_000


def big_table() -> bytes:
    """A sheet's parsed Markdown (~10 MB): a heading, a table of ROWS rows, then more text."""
    lines = [
        "# Sheet1",
        "",
        "| " + " | ".join(f"col{c}" for c in range(COLUMNS)) + " |",
        "|" + "---|" * COLUMNS,
    ]
    lines += ["| " + " | ".join(f"港口渡轮{r % 9973}" for _ in range(COLUMNS)) + " |" for r in range(ROWS)]
    lines += ["", "Totals follow.", ""]
    return "\r\n".join(lines).encode()


@pytest.fixture
def table_doc(deps: Services, tenant: Tenant) -> Iterator[tuple[KnowledgeBase, Knowledge]]:
    """A CSV parsed, chunked and indexed, its parsed Markdown then that of a big sheet (the pipeline's
    parse of 50,000 rows takes a while; the plan task only reads the Markdown)."""
    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="t", summary_model_id=CHAT))
        knowledge = upload(deps, kb, "sheet.csv", b"a,b\n1,2\n")
        drain(deps)
        key = parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
        files_of(deps, knowledge).save(key, big_table(), "text/markdown")
        yield kb, knowledge


def test_the_plan_task_reads_a_big_table_within_a_bounded_memory(
    deps: Services,
    table_doc: tuple[KnowledgeBase, Knowledge],
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chalicelib.enrich.tables as tables

    _, knowledge = table_doc
    asked: list[tables.TableSchema] = []

    def summarise(_chat: Any, _name: str, schema: tables.TableSchema) -> tables.TableSummary:
        asked.append(schema)
        return tables.TableSummary("ferry sailings", {"col0": "the harbour"})

    monkeypatch.setattr(tables, "summarise", summarise)
    queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
    tracemalloc.start()
    try:
        queue.deliver("postprocess", postprocess.handle, deps)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (answer,) = workflow.answers_to("plan-token")
    assert answer.succeeded
    # the model is shown what it was shown when the Markdown was read whole
    (schema,) = asked
    assert schema == tables.schema_of(big_table().decode("utf-8"))
    assert schema.rows == ROWS and len(schema.samples) == tables.SAMPLE_ROWS
    assert schema.columns == [(f"col{c}", "text") for c in range(COLUMNS)]
    assert peak < BOUND, f"the plan task held {peak / 1e6:.1f} MB at its peak reading a {ROWS}-row table"
