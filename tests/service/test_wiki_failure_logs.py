"""A wiki ingest's error of no known kind is logged with its traceback (redacted: frames and classes, not what
a server answered), on every try up to the last one that fails the document. Before, only the type's name
was logged: a bug in our own code left nothing to find it by."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Tenant
from chalicelib.observability import logger

from .test_wiki_stage import deliver_wiki, llm, one_ingest, waiting_for_its_pages, wiki_kb

__all__ = ["llm"]  # the fixture, used by name

MARKER = "SECRET-MARKER"


def test_an_unknown_wiki_error_is_logged_with_its_redacted_traceback_up_to_the_last_try(
    deps: Services,
    tenant: Tenant,
    llm: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chalicelib.enrich import wiki as wiki_module

    def broken_pages(chat: Any, title: str, text: str) -> Any:
        try:
            raise ClientError({"Error": {"Code": "InternalError", "Message": MARKER}}, "InvokeModel")
        except ClientError as error:
            raise RuntimeError("a bug in our code") from error

    monkeypatch.setattr(wiki_module, "pages_for", broken_pages)
    kb = wiki_kb(deps, tenant)
    waiting_for_its_pages(deps, kb, "broken.md", "# Broken\n\nThe keeper logs the weather.\n")
    one_ingest(deps, kb)
    with caplog.at_level(logging.WARNING):
        deliver_wiki(deps)
    logged = [r for r in caplog.records if r.getMessage() == "wiki pages failed"]
    assert len(logged) == deps.settings.stage_max_receives  # every try, the last one (that fails it) too
    for record in logged:
        assert record.exc_info is not None
        line = logger.registered_formatter.format(record)  # as the app's own handler writes it
        assert "broken_pages" in line and MARKER not in line
        assert "ClientError: InternalError (InvokeModel)" in line
