"""Each engine and format on the real corpus files (read-only)."""

import csv
import io
import re

import pytest
from parser_helpers import corpus_bytes

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import ENGINE_CATALOG
from chalicelib.parsers.simple import decode_text


def words(text: str) -> set[str]:
    return set(re.findall(r"\w{3,}", text.lower()))


# ---------------------------------------------------------------- simple engine


def test_txt_is_verbatim(read) -> None:
    result = read("GPL-3.txt")
    assert result.markdown == corpus_bytes("GPL-3.txt").decode("utf-8")
    assert result.metadata["engine"] == "simple"


def test_korean_text_in_legacy_encoding_is_detected(read) -> None:
    original = corpus_bytes("korean-constitution.ko.txt").decode("utf-8")
    result = read("constitution.txt", data=original.encode("cp949"))
    assert result.markdown.replace("\r\n", "\n") == original.replace("\r\n", "\n")
    assert decode_text(original.encode("utf-16")) == original


def test_markdown_variants_verbatim(read) -> None:
    assert read("latex-base-README.markdown").markdown == corpus_bytes("latex-base-README.markdown").decode()
    assert "commander" in read("commander-README.md").markdown.lower()


def test_csv_becomes_markdown_table(read) -> None:
    result = read("statsmodels-statecrime.csv")
    lines = result.markdown.strip().split("\n")
    rows = list(csv.reader(io.StringIO(corpus_bytes("statsmodels-statecrime.csv").decode())))
    assert lines[0].startswith("| " + rows[0][0])
    assert set(lines[1]) <= set("|-")
    assert len(lines) == len(rows) + 1
    assert "Alabama" in result.markdown


def test_large_csv_keeps_every_row(read) -> None:
    result = read("debian-bookworm-packages-50k.csv")
    assert result.markdown.count("\n") >= 50_000


def test_json_structured_markdown(read) -> None:
    md = read("iso_3166-1.json").markdown
    assert "| alpha_2 |" in md or "**alpha_2**" in md
    assert "Afghanistan" in md
    package = read("axios-package.json").markdown
    assert "- **name**: axios" in package
    assert "## dependencies" in package or "## devDependencies" in package


def test_image_placeholder_keeps_original(read) -> None:
    result = read("debian-reference-p40.png")
    assert result.markdown.strip() == "![debian-reference-p40.png](images/original.png)"
    assert result.images[0].ref == "images/original.png"
    assert len(result.images) == 1
    image = result.images[0]
    assert image.is_original and image.mime_type == "image/png"
    assert image.data == corpus_bytes("debian-reference-p40.png")
    assert read("ltnews36-p1.jpeg").images[0].mime_type == "image/jpeg"
    assert read("debian-reference-p40.gif").images[0].mime_type == "image/gif"


@pytest.mark.parametrize(
    "name", ["speech-gpl-preamble.ogg", "speech-python-appetite.m4a", "speech-debian-reference.mp3"]
)
def test_audio_placeholder_carries_bytes(name: str) -> None:
    """The simple engine hands the audio bytes on; the reader (and only the reader) transcribes them."""
    from chalicelib.parsers.base import Limits, ParseContext
    from chalicelib.ports import ReadRequest

    data = corpus_bytes(name)
    request = ReadRequest(data=data, file_name=name, file_type=name.rsplit(".", 1)[-1])
    result = ENGINE_CATALOG["simple"]().parse(request, ParseContext(limits=Limits()))
    assert result.is_audio
    assert result.audio == data
    assert name in result.markdown


def test_audio_without_speech_recognition_fails_for_good(read) -> None:
    with pytest.raises(PermanentStageError, match="speech-recognition"):
        read("speech-gpl-preamble.ogg")


# ---------------------------------------------------------------- builtin engine


def test_pdf_native_text(read) -> None:
    result = read("lppl.pdf")
    assert "LaTeX Project Public License" in result.markdown
    assert result.metadata["scanned_pages"] == []
    assert result.metadata["pages"] == 8


def test_pdf_repeating_footer_removed(read) -> None:
    md = read("debian-reference.en.pdf").markdown
    assert "Debian Reference" in md
    # the running header "Debian Reference <n> / 233" appears once per page in the raw text layer
    assert len(re.findall(r"^Debian Reference \d+ / \d+$", md, flags=re.MULTILINE)) < 20


def test_korean_pdf_text(read) -> None:
    md = read("kotex-utf-doc.ko.pdf").markdown
    assert "한글" in md


def test_scanned_pdf_pages_become_images_without_ocr(read) -> None:
    result = read("latex-usrguide-p1-3.scan.pdf")
    assert result.metadata["scanned_pages"] == [1, 2, 3]
    assert [img.tag for img in result.images] == ["scanned_pdf"] * 3
    assert all(img.data[:3] == b"\xff\xd8\xff" for img in result.images)
    for img in result.images:
        assert f"]({img.ref})" in result.markdown


def test_pdf_force_scanned_option(read) -> None:
    result = read("screenplay-example.pdf", pdf_force_scanned=True)
    assert result.metadata["scanned_pages"] == [1, 2, 3, 4]


def test_docx_headings_lists_and_tables(read) -> None:
    md = read("debian-faq-pkg-basics.docx").markdown
    assert re.search(r"^#{1,3} ", md, flags=re.MULTILINE)
    table = read("python-docx-tbl-styled.docx").markdown
    assert "| foobar | barfoo |" in table
    assert "and a hearty foo to you too sir!" in table


def test_docx_images_put_back_in_place(read) -> None:
    result = read("python-docx-having-images.docx")
    refs = re.findall(r"!\[\]\((docx-image-\d+\.\w+)\)", result.markdown)
    assert len(refs) == 5  # five pictures, three distinct images
    assert {img.ref for img in result.images} == set(refs)
    assert len(result.images) == 3


def test_pptx_slides_and_notes(read) -> None:
    notes = read("python-pptx-notes.pptx").markdown
    assert "### Notes:" in notes
    deck = read("commander-readme.pptx")
    assert deck.markdown.count("<!-- Slide number:") == 54
    assert deck.metadata["slides"] == 54
    assert "commander" in deck.markdown.lower()


def test_xlsx_every_sheet_and_xls_same(read) -> None:
    xlsx = read("iso-codes-countries-currencies.xlsx")
    for sheet in ("## countries", "## currencies", "## scripts"):
        assert sheet in xlsx.markdown
    assert "| Afghanistan |" in xlsx.markdown
    xls = read("iso-codes-countries-currencies.xls")
    assert xls.markdown == xlsx.markdown


def test_xlsx_header_option(read) -> None:
    md = read("statsmodels-statecrime.xlsx", xlsx_first_row_as_header=False).markdown
    assert "| col1 | col2 |" in md and "| state | violent |" in md  # the names row is data
    rows = read("statsmodels-statecrime.xlsx", xlsx_first_row_as_header=False, spreadsheet_layout="rows")
    assert "col1: state" in rows.markdown


def test_html_main_content(read) -> None:
    result = read("python-library-json.html")
    assert result.title.startswith("json")
    assert "json.dumps" in result.markdown
    assert "```" in result.markdown
    assert "Navigation" not in result.markdown.split("\n", 3)[0]
    ko = read("debian-faq-software.ko.html").markdown
    assert "데비안" in ko


def test_html_footnotes_and_notes_in_aside_are_kept_but_sidebars_are_not() -> None:
    from chalicelib.parsers.html import html_to_markdown

    page = (
        "<html><body><main><p>Body text.</p>"
        '<aside class="sidebar-promo">Subscribe to our newsletter</aside>'
        "<aside>Related links elsewhere</aside>"
        '<aside class="footnote-list brackets"><aside class="footnote brackets" id="id5" role="note">'
        "<span>[1]</span><p>If, that is, we ignore the effects of Relativity</p></aside></aside>"
        '<aside role="doc-endnotes"><p>An endnote.</p></aside>'
        '<aside class="admonition warning"><p>Do not run as root.</p></aside>'
        "</main></body></html>"
    )
    md = html_to_markdown(page).markdown
    assert "we ignore the effects of Relativity" in md  # Sphinx footnotes
    assert "An endnote." in md and "Do not run as root." in md
    assert "newsletter" not in md and "Related links" not in md


def test_mhtml(read) -> None:
    result = read("python-library-json.mhtml")
    assert "json.dumps" in result.markdown
    assert result.title


def test_epub_spine_and_images(read) -> None:
    result = read("debian-faq.en.epub")
    assert result.title
    assert result.markdown.startswith("# ")
    assert len(result.markdown) > 100_000
    for img in result.images:
        assert f"({img.ref})" in result.markdown
    assert "데비안" in read("debian-faq.ko.epub").markdown


# ---------------------------------------------------------------- catalog, rules and fallbacks


def test_engine_catalog(reader) -> None:
    listed = {e["name"]: e for e in reader.engines()}
    assert set(listed) == set(ENGINE_CATALOG)
    for engine in listed.values():
        assert {"name", "description", "file_types", "available", "reason"} <= set(engine)
    assert "pdf" in listed["builtin"]["file_types"]
    assert "pdf" not in listed["simple"]["file_types"]


def test_markitdown_engine_by_rule(read) -> None:
    result = read("python-howto-sorting.docx", parser_engine_rules={"docx": "markitdown"})
    assert result.metadata["engine"] == "markitdown"
    assert "sort" in result.markdown.lower()


def test_rules_as_weknora_list(read) -> None:
    rules = [{"file_types": ["html", "htm"], "engine": "markitdown"}]
    assert read("python-howto-sorting.htm", parser_engine_rules=rules).metadata["engine"] == "markitdown"


def test_unknown_or_unfit_engine_falls_back_to_builtin(read) -> None:
    unfit = read("lppl.pdf", parser_engine_rules={"pdf": "simple"})
    assert unfit.metadata["engine"] == "builtin"
    assert "does not take .pdf" in unfit.metadata["engine_fallback"]
    unknown = read("lppl.pdf", parser_engine_rules={"pdf": "mineru"})
    assert unknown.metadata["engine"] == "builtin"
    assert "unknown" in unknown.metadata["engine_fallback"]


def test_unavailable_engine_falls_back(read, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.parsers.engines import MarkItDownEngine

    monkeypatch.setattr(MarkItDownEngine, "availability", lambda self: (False, "not installed"))
    result = read("python-howto-sorting.docx", parser_engine_rules={"docx": "markitdown"})
    assert result.metadata["engine"] == "builtin"
    assert "unavailable" in result.metadata["engine_fallback"]


def test_docx_recall_against_python_docx_text(read) -> None:
    import docx

    doc = docx.Document(io.BytesIO(corpus_bytes("python-howto-sorting.docx")))
    reference = [p.text for p in doc.paragraphs]
    reference += [c.text for t in doc.tables for row in t.rows for c in row.cells]
    expected = words("\n".join(reference))
    ours = words(read("python-howto-sorting.docx").markdown)
    assert len(expected & ours) / len(expected) > 0.99


def test_failed_parse_raises_permanent(read) -> None:
    with pytest.raises(PermanentStageError):
        read("amsmath.truncated.pdf")


def test_html_legacy_charset_from_meta(read) -> None:
    html = '<html><head><meta charset="euc-kr"><title>데비안</title></head><body><p>데비안 패키지</p></body></html>'
    result = read("ko.html", data=html.encode("euc-kr"))
    assert result.title == "데비안"
    assert "데비안 패키지" in result.markdown


def test_concurrent_reads_share_one_reader(reader) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from chalicelib.ports import ReadRequest

    names = ["lppl.pdf", "ltnews36.pdf", "python-howto-sorting.docx", "screenplay-example.pdf"] * 2
    payloads = {n: corpus_bytes(n) for n in names}

    def one(name: str) -> str:
        return reader.read(
            ReadRequest(data=payloads[name], file_name=name, file_type=name.rsplit(".", 1)[1])
        ).markdown

    serial = {n: one(n) for n in set(names)}
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one, names))
    assert results == [serial[n] for n in names]
