"""The `spreadsheet_layout` setting on the fakes (issue 27 item 7): a knowledge base's value reaches the
spreadsheet reader, an upload's `process_config` beats it, and the default is the Markdown table."""

from __future__ import annotations

import pytest
from project_paths import CORPUS

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ProcessConfig, UpdateKnowledgeBase
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.operations.knowledge_bases import create_kb, update_kb

from .conftest import drain

ROW_LINE = "state: Alabama, violent: 459.9"
TABLE_ROW = "| Alabama | 459.9 |"
TABLE_HEADER = "| state | violent |"
NAMED_COLUMNS = "| col1 | col2 |"  # the first row read as data


@pytest.mark.parametrize(
    ("kb_layout", "upload_layout", "expected"),
    [
        (None, None, TABLE_ROW),
        ("rows", None, ROW_LINE),
        ("rows", "table", TABLE_ROW),  # the upload's setting wins
        ("table", "rows", ROW_LINE),
    ],
)
def test_the_layout_setting_reaches_the_spreadsheet_reader(
    deps: Services, tenant: Tenant, kb_layout: str | None, upload_layout: str | None, expected: str
) -> None:
    settings = {"name": "sheets"} | ({"spreadsheet_layout": kb_layout} if kb_layout else {})
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase.model_validate(settings))
    overrides = ProcessConfig(spreadsheet_layout=upload_layout).overrides() if upload_layout else {}
    data = (CORPUS / "statsmodels-statecrime.xlsx").read_bytes()
    created = create_from_file(
        deps, tenant.id, kb.id, FileUpload(data=data, file_name="statecrime.xlsx", overrides=overrides)
    )
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status != ParseStatus.FAILED, row
    text = "\n".join(chunk.content for chunk in deps.chunks.list(created.id))
    assert expected in text
    assert (ROW_LINE in text) != (TABLE_ROW in text)


def test_the_layout_is_stored_and_changed_on_the_knowledge_base(deps: Services, tenant: Tenant) -> None:
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="sheets"))
    assert kb.spreadsheet_layout == "table" and kb.to_dict()["spreadsheet_layout"] == "table"
    updated, _ = update_kb(deps, tenant.id, kb.id, UpdateKnowledgeBase(spreadsheet_layout="rows"))
    stored = deps.kbs.get(kb.id)
    assert updated.spreadsheet_layout == "rows" and stored is not None and stored.spreadsheet_layout == "rows"


@pytest.mark.parametrize(
    ("first_row_as_header", "header_row"), [(None, TABLE_HEADER), (False, NAMED_COLUMNS)]
)
def test_the_first_row_override_reaches_the_spreadsheet_reader(
    deps: Services, tenant: Tenant, first_row_as_header: bool | None, header_row: str
) -> None:
    """WeKnora's builtin-engine override `xlsx_first_row_as_header`, given in an upload's `process_config`."""
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="sheets"))
    overrides = ProcessConfig(xlsx_first_row_as_header=first_row_as_header).overrides()
    data = (CORPUS / "statsmodels-statecrime.xlsx").read_bytes()
    created = create_from_file(
        deps, tenant.id, kb.id, FileUpload(data=data, file_name="statecrime.xlsx", overrides=overrides)
    )
    drain(deps)
    text = "\n".join(chunk.content for chunk in deps.chunks.list(created.id))
    assert header_row in text
    assert (NAMED_COLUMNS in text) == (first_row_as_header is False)
