"""Uploaded bytes are stored exactly as sent, whatever Content-Type the form part declares.

Regression (issue 9): the form parser was built on the `email` package, which interprets a part's own
Content-Type: an .mhtml sent as `message/rfc822` (what `mimetypes` assigns) came out empty, and sent as
`multipart/related` it was stored with two bytes changed (a different MD5)."""

from __future__ import annotations

import hashlib
import mimetypes
import uuid
from pathlib import Path

import pytest

from chalicelib.api.http import parse_multipart
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.filetypes import IMPORTABLE_EXTENSIONS

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
PART_TYPES = (
    "application/octet-stream",
    "message/rfc822",
    "multipart/related; boundary=inner",
    "text/plain; charset=utf-8",
    "text/html",
    None,  # no Content-Type at all
)


def _one_file_per_extension() -> list[Path]:
    seen: dict[str, Path] = {}
    for path in sorted(CORPUS.glob("*")):
        ext = path.suffix.lstrip(".").lower()
        if ext in IMPORTABLE_EXTENSIONS and ext not in seen and path.stat().st_size:
            seen[ext] = path
    return list(seen.values())


def _body(name: str, data: bytes, part_type: str | None, boundary: str) -> bytes:
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
    if part_type:
        head += f"Content-Type: {part_type}\r\n"
    field = f'--{boundary}\r\nContent-Disposition: form-data; name="channel"\r\n\r\nweb\r\n'
    return field.encode() + head.encode() + b"\r\n" + data + f"\r\n--{boundary}--\r\n".encode()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not beside the project")
@pytest.mark.parametrize("path", _one_file_per_extension(), ids=lambda p: p.suffix)
def test_every_extension_is_stored_byte_exact_under_every_part_type(path: Path) -> None:
    data = path.read_bytes()
    guessed = mimetypes.guess_type(path.name)[0]
    for part_type in (*PART_TYPES, guessed):
        boundary = f"----{uuid.uuid4().hex}"
        form = parse_multipart(
            f"multipart/form-data; boundary={boundary}", _body(path.name, data, part_type, boundary)
        )
        name, received = form.files["file"]
        assert name == path.name
        assert hashlib.md5(received).hexdigest() == hashlib.md5(data).hexdigest(), part_type
        assert form.fields == {"channel": "web"}


def test_a_body_that_contains_the_boundary_text_inside_a_line_is_kept() -> None:
    boundary = "----abc"
    data = b"line with ----abc inside\r\n--not-the-boundary\r\n\x00\xff binary"
    form = parse_multipart(f"multipart/form-data; boundary={boundary}", _body("x.txt", data, None, boundary))
    assert form.files["file"][1] == data


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "multipart/form-data", "multipart/form-data; boundary=", "text/plain; boundary=x"],
)
def test_not_a_multipart_form_is_a_400(content_type: str) -> None:
    with pytest.raises(BadRequest) as error:
        parse_multipart(content_type, b"--x\r\n\r\n--x--")
    assert error.value.code == "invalid_multipart"


def test_a_truncated_body_is_a_400() -> None:
    with pytest.raises(BadRequest) as error:
        parse_multipart(
            "multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="a"\r\n'
        )
    assert error.value.code == "invalid_multipart"


@pytest.mark.parametrize("second", ['name="file"; filename="b.txt"', 'name="channel"', 'name="file"'])
def test_a_part_name_given_twice_is_a_400_not_a_silent_choice(second: str) -> None:
    """Two `file` parts kept the last: the first upload was accepted and lost."""
    body = (
        b'--x\r\nContent-Disposition: form-data; name="channel"\r\n\r\nweb\r\n'
        b'--x\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nfirst\r\n'
        + f"--x\r\nContent-Disposition: form-data; {second}\r\n\r\nsecond\r\n--x--\r\n".encode()
    )
    with pytest.raises(BadRequest) as error:
        parse_multipart("multipart/form-data; boundary=x", body)
    assert error.value.code == "duplicate_form_part"
    assert error.value.status == 400


@pytest.mark.parametrize(
    ("disposition", "expected"),
    [
        # only filename* (RFC 5987): python-multipart reads none, so the part was not a file at all
        ("filename*=UTF-8''%E4%BD%A0%E5%A5%BD.txt", "你好.txt"),
        # .NET's HttpClient: an encoded-word in filename, the name itself in filename* (RFC 6266 prefers it)
        ("filename=\"=?utf-8?B?5L2g5aW9LnR4dA==?=\"; filename*=utf-8''%E4%BD%A0%E5%A5%BD.txt", "你好.txt"),
        ("filename*=utf-8''%E4%BD%A0.txt; filename=\"fallback.txt\"", "你.txt"),
        ('filename="plain.txt"', "plain.txt"),
        ("filename*=UTF-8''%FF%FE.txt", "\ufffd\ufffd.txt"),  # not UTF-8: replaced, still a .txt
        ("filename*=no-such-charset''%41.txt", "A.txt"),
    ],
)
def test_a_file_name_given_as_filename_star_is_read(disposition: str, expected: str) -> None:
    body = f'--x\r\nContent-Disposition: form-data; name="file"; {disposition}\r\n\r\nhello\r\n--x--\r\n'
    form = parse_multipart("multipart/form-data; boundary=x", body.encode())
    assert form.files["file"] == (expected, b"hello") and form.fields == {}


@pytest.mark.parametrize("charset", ["idna", "punycode", "undefined", "unicode_escape", "utf-8\x00"])
def test_a_form_field_in_a_codec_that_is_no_text_charset_is_a_400(charset: str) -> None:
    # idna takes no "replace", punycode and undefined refuse the bytes, unicode_escape spells a lone surrogate
    body = (
        '--x\r\nContent-Disposition: form-data; name="file_name"\r\n'
        f"Content-Type: text/plain; charset={charset}\r\n\r\n\\ud800\xff\r\n--x--\r\n"
    )
    with pytest.raises(BadRequest) as error:
        parse_multipart("multipart/form-data; boundary=x", body.encode("latin-1"))
    assert error.value.code == "invalid_multipart" and error.value.status == 400


@pytest.mark.parametrize(
    "disposition",
    [
        "filename*=idna''%FF%FEa.md",
        "filename*=undefined''a.md",
        "filename*=unicode_escape''x%5Cud800y.md",
        "filename*=utf-8\x00''a.md",
    ],
)
def test_a_filename_star_that_cannot_be_a_file_name_is_a_400(disposition: str) -> None:
    body = f'--x\r\nContent-Disposition: form-data; name="file"; filename="a.md"; {disposition}\r\n\r\nhi\r\n--x--\r\n'
    with pytest.raises(BadRequest) as error:
        parse_multipart("multipart/form-data; boundary=x", body.encode())
    assert error.value.code == "invalid_multipart" and error.value.status == 400
