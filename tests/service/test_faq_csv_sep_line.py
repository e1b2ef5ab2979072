"""A FAQ CSV saved by Excel with a first line `sep=;` is read with that delimiter, as the docreader reads a
CSV document (one rule, `chalicelib.domain.csv_rows.excel_sep_line`), and the line is no entry."""

from __future__ import annotations

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq.rows import read_rows

from .test_faq import entries_of, import_uploaded_csv


def test_an_excel_sep_line_names_the_delimiter_of_the_import(deps: Services, faq_kb: KnowledgeBase) -> None:
    text = (
        "sep=;\r\n"
        "question;answers;similar_questions\r\n"
        "Opening hours;Open 9 to 5, Monday to Friday;When are you open\r\n"
        'Parking;"Behind the building; free";\r\n'
    )
    view = import_uploaded_csv(deps, faq_kb, text)
    assert view["progress"]["added"] == 2
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"Opening hours", "Parking"}
    assert stored["Opening hours"].answers == ["Open 9 to 5, Monday to Friday"]
    assert stored["Opening hours"].similar_questions == ["When are you open"]
    assert stored["Parking"].answers == ["Behind the building; free"]


def test_quoted_sep_line_with_a_bom_and_a_plain_csv_read_as_before() -> None:
    quoted = read_rows('\ufeff"sep=|"\nquestion|answers\nPets|Dogs welcome\n'.encode(), "faq.csv")
    assert [(r.question, r.answers) for r in quoted] == [("Pets", ["Dogs welcome"])]
    plain = read_rows(b"question,answers\nsep=x,an entry whose question looks like a sep line\n", "faq.csv")
    assert [r.question for r in plain] == ["sep=x"]
