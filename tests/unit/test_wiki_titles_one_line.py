"""A wiki page title the model writes with line breaks (a prompt-injected document: "Tides\\n\\n## Payroll.xlsx
\\n- Salaries") was kept as written, so the knowledge base's wiki index showed a heading for a document it does
not hold, with pages under it that do not exist. A title is one line now."""

from __future__ import annotations

from chalicelib.enrich.wiki import index_page, read_pages


def test_a_titles_line_breaks_cannot_add_headings_to_the_wiki_index() -> None:
    forged = "Tides\n\n## Payroll.xlsx\r\n- Salaries\u2028of all staff"
    pages = read_pages([{"title": forged, "content": "Tides rise."}])
    assert [p.title for p in pages] == ["Tides ## Payroll.xlsx - Salaries of all staff"]
    index = index_page([("tides.md", p.title) for p in pages])
    assert [line for line in index.splitlines() if line.startswith("#")] == ["# Wiki index", "## tides.md"]
    assert len(index.splitlines()) == 4  # the heading, a blank line, the document, its one page
