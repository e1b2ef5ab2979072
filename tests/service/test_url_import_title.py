"""A URL import's title when none is sent: derived from the URL or the file name sent, as one line of
printable text, as a title sent must be (`commands.OneLine`). A URL's path (or a file name) may hold a
bidirectional override (`invoice\\u202efdp.exe` shows as `invoiceexe.pdf`), a C1 control or a line separator,
and the SSRF check lets them through; the title is shown to everyone the knowledge base is shared with."""

from __future__ import annotations

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import NOT_ONE_LINE, UrlImportRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.net.ssrf import validate_url
from chalicelib.operations.create import create_from_url


@pytest.mark.parametrize(
    ("url", "file_name", "title"),
    [
        ("https://example.org/invoice\u202efdp.exe", "", "https://example.org/invoicefdp.exe"),
        ("https://example.org/notes\u0085page\u2028two", "", "https://example.org/notes page two"),
        ("https://example.org/q3", "Q3\u2028plan.pdf", "Q3plan.pdf"),
    ],
)
def test_a_derived_title_is_one_line_of_printable_text(
    deps: Services, kb: KnowledgeBase, url: str, file_name: str, title: str
) -> None:
    validate_url(url, resolve=False)  # the production check lets such a URL through
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url, file_name=file_name))
    assert created.title == title and not NOT_ONE_LINE.search(created.title)
    assert created.source == url  # the URL itself is kept as sent


def test_a_long_url_still_makes_a_title_of_at_most_500_characters(deps: Services, kb: KnowledgeBase) -> None:
    url = "https://example.org/" + "a" * 1500
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    assert created.title == url[:500]
