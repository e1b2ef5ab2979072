"""The parse budget (Limits.parse_budget_s) counts from before the preflight, and the preflight checks it: an
EPUB's chapters and an HTML page's nesting are measured in Python (html_depth.HtmlDepth, seconds per MB of
dense tags), and a small EPUB inflating to hundreds of MB of `<p>` spent past the Lambda's 900 s there, before
the budget's clock had even started (timeout, retries, the DLQ instead of a failed document). Tests count
work, not time: a budget of 0 s must stop the reader before any engine runs."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.html_depth import HtmlDepth, measure_html
from chalicelib.parsers.reader import EngineDocReader
from chalicelib.ports import ReadRequest, ReadResult

#: enough dense tags for several of HtmlDepth's looks at the clock (html_depth.CHECK_EVERY), small enough to
#: stay fast
DENSE = b"<html><body>" + b"<p>" * 50_000 + b"</body></html>"


class SpyEngine:
    """An engine that records being asked: the reader must refuse before it."""

    name = "builtin"
    description = "spy"
    file_types = frozenset({"html", "epub"})

    def __init__(self) -> None:
        self.calls = 0

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def parse(self, request: ReadRequest, ctx: ParseContext) -> ReadResult:
        self.calls += 1
        return ReadResult(markdown="text")


def _epub(chapter: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        zf.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        zf.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            '<dc:title>Book</dc:title><dc:identifier id="id">x</dc:identifier></metadata><manifest>'
            '<item id="c0" href="ch0.xhtml" media-type="application/xhtml+xml"/></manifest>'
            '<spine><itemref idref="c0"/></spine></package>',
        )
        zf.writestr("OEBPS/ch0.xhtml", chapter)
    return buf.getvalue()


def _read(data: bytes, name: str, **limits: Any) -> tuple[SpyEngine, Exception | None]:
    spy = SpyEngine()
    reader = EngineDocReader({"builtin": spy})
    options = {"limits": limits} if limits else {}
    try:
        reader.read(
            ReadRequest(data=data, file_name=name, file_type=name.rsplit(".", 1)[-1], options=options)
        )
    except PermanentStageError as exc:
        return spy, exc
    return spy, None


@pytest.mark.parametrize(
    ("name", "data"),
    [("page.html", DENSE + b" "), ("book.epub", _epub(DENSE + b"  "))],  # bytes measured nowhere else
)
def test_a_spent_budget_stops_the_preflight_before_any_engine(name: str, data: bytes) -> None:
    spy, error = _read(data, name, parse_budget_s=0)
    assert error is not None and "took longer than 0 s" in str(error)
    assert spy.calls == 0  # HEAD: the whole preflight ran, then the engine, and only then the budget's check


@pytest.mark.parametrize(("name", "data"), [("page.html", DENSE), ("book.epub", _epub(DENSE))])
def test_within_the_budget_the_preflight_measures_as_before(name: str, data: bytes) -> None:
    spy, error = _read(data, name)
    assert error is None and spy.calls == 1


def test_the_nesting_measure_looks_at_the_clock_as_it_reads() -> None:
    from chalicelib.parsers.html_depth import CHECK_EVERY

    assert 3 * CHECK_EVERY <= 50_000
    looks: list[int] = []

    def check_time() -> None:
        looks.append(1)
        if len(looks) == 2:
            raise PermanentStageError("budget spent")

    with pytest.raises(PermanentStageError, match="budget spent"):
        measure_html(DENSE + b"   ", 10_000, check_time)
    assert len(looks) == 2
    # the same answer with or without a clock
    timed = HtmlDepth(10_000, lambda: None)
    timed.feed(DENSE)
    untimed = HtmlDepth(10_000)
    untimed.feed(DENSE)
    assert timed.max_depth == untimed.max_depth == 2


@pytest.mark.parametrize(
    ("markup", "deepest", "open_at_end"),
    [  # the answers of the rules' full walk (HEAD), which the shortcut for a p/li/dd/dt at the top keeps
        (b"<div><form><p></form><p><div><div>", 3, 3),  # a removed form under the p goes with it
        (b"<p><ul><li><li><div>", 2, 2),
        (b"<ul><li><p><li><div>", 2, 2),  # a p under the li closes too
        (b"<ul><li><li><li><div>", 2, 2),
        (b"<dl><dd><dd><dt><dt><div>", 2, 2),
        (b"<button><p><li><li><div>", 2, 2),
        (b"<p><svg><p><p><div>", 1, 1),
        (b"<ul><li><span><li><div>", 2, 2),
    ],
)
def test_a_paragraph_or_item_reopened_at_the_top_measures_as_the_rules_say(
    markup: bytes, deepest: int, open_at_end: int
) -> None:
    depth = HtmlDepth(10_000)
    depth.feed(markup)
    assert (depth.max_depth, depth.depth) == (deepest, open_at_end)
