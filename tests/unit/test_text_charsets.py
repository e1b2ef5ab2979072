"""Only a text charset is used to read a page or a form field (`domain.charsets`): Python's punycode decoder
is pure Python and quadratic (a page of 240 KB named `charset=punycode` took minutes), and `undefined`,
`punycode` and `idna` raise a bare UnicodeError nobody classified (a URL import retried, then `unknown`).
Such a charset is read as an unknown one is: the text's own encoding (a reviewer's proof)."""

from __future__ import annotations

import time

import pytest

from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.html import decode_html, parse_html
from chalicelib.ports import ReadRequest

PAGE = "<html><head><title>t</title></head><body><p>see page-2 for more: café</p></body></html>".encode()


@pytest.mark.parametrize(
    "name",
    ["punycode", "undefined", "idna", "unicode_escape", "raw-unicode-escape", "base64", "no-such", "u\x00"],
)
def test_a_codec_that_is_no_text_charset_is_not_one(name: str) -> None:
    from chalicelib.domain.charsets import text_codec

    assert text_codec(name) is None


@pytest.mark.parametrize(
    ("name", "codec"), [("UTF8", "utf-8"), ("latin1", "iso8859-1"), ("Shift_JIS", "shift_jis")]
)
def test_a_text_charset_names_its_codec(name: str, codec: str) -> None:
    from chalicelib.domain.charsets import text_codec

    assert text_codec(name) == codec


@pytest.mark.parametrize("charset", ["punycode", "undefined", "idna", "unicode_escape"])
def test_a_page_named_in_a_codec_that_is_no_charset_is_read_as_its_bytes_say(charset: str) -> None:
    assert decode_html(PAGE, charset) == PAGE.decode("utf-8")
    in_meta = PAGE.replace(b"<head>", f'<head><meta charset="{charset}">'.encode())
    assert decode_html(in_meta) == in_meta.decode("utf-8")


def test_a_utf7_reading_with_lone_surrogates_is_not_taken() -> None:
    assert "\ud800" not in decode_html(b"<p>+2AA- text</p>", "utf-7")


def test_a_named_text_charset_still_decides() -> None:
    assert decode_html("<p>café</p>".encode("cp1252"), "windows-1252") == "<p>café</p>"


def test_an_uploaded_page_naming_punycode_is_parsed_in_reasonable_time() -> None:
    data = b'<html><head><meta charset="punycode"></head><body><p>' + b"x" * 120_000 + b"-" + b"a" * 120_000
    started = time.monotonic()
    parse_html(ReadRequest(data=data, file_name="p.html", file_type="html"), ParseContext())
    assert time.monotonic() - started < 5.0


def test_a_large_form_field_named_punycode_is_refused_at_once() -> None:
    from chalicelib.api.http import parse_multipart
    from chalicelib.domain.errors import BadRequest

    value = b"x" * 120_000 + b"-" + b"a" * 120_000
    body = (
        b'--x\r\nContent-Disposition: form-data; name="file_name"\r\n'
        b"Content-Type: text/plain; charset=punycode\r\n\r\n" + value + b"\r\n--x--\r\n"
    )
    started = time.monotonic()
    with pytest.raises(BadRequest) as error:
        parse_multipart("multipart/form-data; boundary=x", body)
    assert error.value.code == "invalid_multipart" and time.monotonic() - started < 5.0
