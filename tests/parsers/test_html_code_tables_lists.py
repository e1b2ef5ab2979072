"""HTML structure the docreader keeps (found by an audit on unseen documents): a <pre> block's indentation
(html, mhtml, epub), EPUB 3 footnotes (`epub:type`), a table's caption, its rowspans, an ordered list's
start number, and Excel's `sep=;` line at the top of a CSV."""

from __future__ import annotations

import io
import zipfile

from chalicelib.parsers.html import html_to_markdown


def _page(body: str) -> bytes:
    return f"<html><head><title>t</title></head><body>{body}</body></html>".encode()


def _epub(*chapters: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        zf.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        items = "".join(
            f'<item id="c{i}" href="ch{i}.xhtml" media-type="application/xhtml+xml"/>'
            for i in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
        zf.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            '<dc:title>Book</dc:title><dc:identifier id="id">x</dc:identifier></metadata>'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for i, body in enumerate(chapters):
            zf.writestr(
                f"OEBPS/ch{i}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
                f'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>c{i}</title></head><body>{body}</body></html>',
            )
    return buf.getvalue()


CODE = "def f(x):\n    if x:\n        return  x*2\n\n\n    return 0"


def test_pre_code_keeps_its_indentation_and_blank_lines(read) -> None:
    md = read("page.html", data=_page(f"<p>Intro text.</p><pre>{CODE}</pre><p>Outro.</p>")).markdown
    assert f"```\n{CODE}\n```" in md
    assert "Intro text." in md and "Outro." in md


def test_pre_code_with_a_language_inside_a_list_keeps_its_indentation() -> None:
    html = '<ul><li><p>Step one:</p><div class="highlight-python"><pre>for i in x:\n    go(i)</pre></div></li></ul>'
    md = html_to_markdown(html, main_only=False).markdown
    assert "```python\n" in md
    lines = md.split("\n")
    loop = next(i for i, line in enumerate(lines) if line.strip() == "for i in x:")
    assert lines[loop + 1] == lines[loop].replace("for i in x:", "    go(i)")


def test_tidy_outside_code_blocks_is_unchanged() -> None:
    html = "<p>Para <span>\n   inline</span></p><div>  \n   Loose text</div><pre>  kept</pre><p>   After</p>"
    md = html_to_markdown(html, main_only=False).markdown
    assert "\nLoose text" in md and "\nAfter" in md and "\n\n\n" not in md
    assert "```\n  kept\n```" in md


def test_a_row_of_tildes_in_prose_fences_nothing() -> None:
    md = html_to_markdown("<p>~~~</p><div>   Spaced</div><p>End</p>", main_only=False).markdown
    assert "\nSpaced" in md


def test_pre_in_epub_and_mhtml_keeps_its_indentation(read) -> None:
    epub = read("book.epub", data=_epub(f"<h1>Chapter</h1><pre>{CODE}</pre>")).markdown
    assert f"```\n{CODE}\n```" in epub
    mhtml = (
        'MIME-Version: 1.0\r\nContent-Type: multipart/related; type="text/html"; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/html; charset=utf-8\r\nContent-Location: http://x/\r\n\r\n"
        f"<html><body><p>Saved page.</p><pre>{CODE}</pre></body></html>\r\n--B--\r\n"
    )
    assert f"```\n{CODE}\n```" in read("page.mhtml", data=mhtml.encode()).markdown


def test_corpus_class_body_stays_indented(read) -> None:
    md = read("python-tutorial-classes.html").markdown
    assert 'class MyClass:\n    """A simple example class"""\n    i = 12345\n\n    def f(self):\n' in md
    assert "\n        return 'hello world'\n" in md


def test_epub3_footnotes_and_endnotes_are_kept_sidebars_are_not(read) -> None:
    chapter = (
        "<h1>Two</h1><p>Body<a epub:type='noteref' href='#n1'>1</a>.</p>"
        "<aside epub:type='footnote' id='n1'><p>EPUBFOOTNOTE body</p></aside>"
        "<aside epub:type='endnote' id='n2'><p>EPUBENDNOTE body</p></aside>"
        "<aside role='doc-footnote'><p>ARIAFOOTNOTE body</p></aside>"
        "<aside><p>SIDEBAR links</p></aside>"
    )
    md = read("notes.epub", data=_epub(chapter)).markdown
    assert "EPUBFOOTNOTE body" in md and "EPUBENDNOTE body" in md and "ARIAFOOTNOTE body" in md
    assert "SIDEBAR" not in md


def test_table_caption_is_a_line_before_the_table(read) -> None:
    html = "<p>Intro.</p><table><caption>Quarterly <b>sales</b></caption><tr><th>H1</th></tr><tr><td>D1</td></tr></table>"
    md = read("cap.html", data=_page(html)).markdown
    assert "Quarterly **sales**\n\n| H1 |\n|---|\n| D1 |" in md
    single = html_to_markdown("<table><caption>Only</caption><tr><td>cell</td></tr></table>").markdown
    assert single == "Only\n\ncell\n"


def test_rowspan_keeps_later_cells_in_their_columns(read) -> None:
    html = (
        "<table><tr><th rowspan=2>RS</th><th colspan=2>CS</th></tr><tr><td>c1</td><td>c2</td></tr>"
        "<tr><td>a</td><td rowspan=3>mid</td><td>b</td></tr><tr><td>d</td><td>e</td></tr></table>"
    )
    md = read("spans.html", data=_page(html)).markdown
    assert "| RS | CS |  |\n|---|---|---|\n|  | c1 | c2 |\n| a | mid | b |\n| d |  | e |" in md


def test_rowspan_in_a_nested_table_stays_in_that_table() -> None:
    html = (
        "<table><tr><td>Outer A</td><td><table><tr><td rowspan=2>IN</td><td>i1</td></tr><tr><td>i2</td></tr>"
        "</table></td></tr><tr><td>Outer B</td><td>Outer C</td></tr></table>"
    )
    md = html_to_markdown(html).markdown
    assert "| Outer B | Outer C |" in md
    assert "\\| IN \\| i1 \\| \\|---\\|---\\| \\| \\| i2 \\|" in md


def test_ordered_list_honours_start_and_reversed(read) -> None:
    md = read("ol.html", data=_page("<ol start='5'><li>five</li><li>six</li></ol>")).markdown
    assert "5. five\n6. six" in md
    rev = html_to_markdown("<ol reversed><li>three</li><li>two</li><li>one</li></ol>").markdown
    assert "3. three\n2. two\n1. one" in rev
    rev_start = html_to_markdown("<ol reversed start=10><li>ten</li><li>nine</li></ol>").markdown
    assert "10. ten\n9. nine" in rev_start
    odd = html_to_markdown("<ol start='x'><li>one</li></ol><ul start=4><li>dot</li></ul>").markdown
    assert "1. one" in odd and "- dot" in odd


def test_csv_excel_sep_line_is_the_delimiter_not_a_row(read) -> None:
    text = "sep=;\r\nname;price\r\nÄpfel;1,50\r\nBirnen;2,25\r\n"
    md = read("sep.csv", data=text.encode("cp1252")).markdown
    assert "sep=" not in md
    assert md.startswith("| name | price |\n|---|---|\n| Äpfel | 1,50 |")
    quoted = read("q.csv", data=b'"sep=|"\na|b\n1|2\n').markdown
    assert quoted.startswith("| a | b |\n|---|---|\n| 1 | 2 |")


def test_csv_without_a_sep_line_is_sniffed_as_before(read) -> None:
    md = read("plain.csv", data=b"sep,x\n1,2\n").markdown
    assert md.startswith("| sep | x |")


def test_a_bare_hidden_attribute_hides_but_until_found_does_not() -> None:
    html = "<p>Shown.</p><div hidden>HIDDENATTR</div><div hidden=''>EMPTYHIDDEN</div><div hidden='until-found'>FOUND</div>"
    md = html_to_markdown(html, main_only=False).markdown
    assert "Shown." in md and "FOUND" in md
    assert "HIDDENATTR" not in md and "EMPTYHIDDEN" not in md
