"""A URL import's page title is the server's text shown as the document's title (its spans' `title`, its
Markdown heading): one line of printable text, as a title a tenant sends must be; no terminal escape
sequence, bidirectional override, C1 control or line separator of the server's choosing survives."""

from chalicelib.commands import NOT_ONE_LINE
from chalicelib.net import AllowList, fetch_url_document

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
PARAGRAPH = "Lighthouse keepers log the weather at dawn and at dusk, every single day of the year. " * 4


def test_a_page_title_keeps_no_control_or_bidi_characters(server) -> None:
    title = "Tide&#27;[31m tables&#x202E;fdp.exe\u0085next&#x2028;line"
    page = f"<html><head><title>{title}</title></head><body><p>{PARAGRAPH}</p></body></html>".encode()
    server.body("/tides", page, "text/html; charset=utf-8")
    _name, file_type, data, got = fetch_url_document(server.url("/tides"), LOOPBACK)
    assert file_type == "md"
    assert got == "Tide [31m tablesfdp.exe next line"
    heading = data.decode().splitlines()[0]
    assert heading == f"# {got}" and not NOT_ONE_LINE.search(heading)
