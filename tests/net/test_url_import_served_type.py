"""A URL import whose server names the file wrongly: a download served as `application/octet-stream`, with
no type, or as a page, is imported as what its bytes are (never converted as HTML into Markdown of its
binary bytes), and binary data of no importable type is refused as unsupported."""

import io
import zipfile

import pytest

from chalicelib.net import AllowList, fetch_url_document

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
PDF = b"%PDF-1.4\n1 0 obj <</Type /Catalog>> endobj\n" + bytes(range(256)) * 8 + b"\n%%EOF\n"


def docx_bytes() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
    return out.getvalue()


@pytest.mark.parametrize("content_type", ["application/octet-stream", "", "text/html; charset=utf-8"])
def test_a_pdf_served_under_another_type_is_imported_as_a_pdf(server, content_type: str) -> None:
    server.body("/download", PDF, content_type)
    name, file_type, data, title = fetch_url_document(server.url("/download?id=7"), LOOPBACK)
    assert (name, file_type, data, title) == ("download.pdf", "pdf", PDF, "")


def test_an_office_file_served_as_octet_stream_is_imported_as_its_kind(server) -> None:
    body = docx_bytes()
    server.body("/get", body, "application/octet-stream")
    name, file_type, data, _title = fetch_url_document(server.url("/get"), LOOPBACK)
    assert (name, file_type, data) == ("get.docx", "docx", body)


def test_an_image_linked_as_a_text_file_is_imported_as_the_image(server) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    server.body("/notes.txt", png, "text/plain")
    _name, file_type, data, _title = fetch_url_document(server.url("/notes.txt"), LOOPBACK)
    assert (file_type, data) == ("png", png)


def test_binary_data_of_no_importable_type_is_not_read_as_a_page(server) -> None:
    blob = b"MZ\x90\x00" + bytes(range(256)) * 4  # an executable, served as anything
    for content_type in ("application/octet-stream", "text/html"):
        server.body("/tool", blob, content_type)
        name, file_type, data, _title = fetch_url_document(server.url("/tool"), LOOPBACK)
        assert (name, file_type, data) == ("download", "", blob)  # the worker refuses it: unsupported


def test_a_page_that_mentions_the_pdf_header_is_still_a_page(server) -> None:
    text = "The %PDF- header starts every PDF file; this page explains the rest of the format. " * 3
    page = f"<html><head><title>PDF headers</title></head><body><p>{text}</p></body></html>".encode()
    server.body("/about-pdf", page, "text/html")
    _name, file_type, data, title = fetch_url_document(server.url("/about-pdf"), LOOPBACK)
    assert file_type == "md" and title == "PDF headers" and b"explains the rest" in data


def test_a_text_file_with_a_stray_nul_keeps_its_named_type(server) -> None:
    body = b"id,name\n1,caf\x00e\n"
    server.body("/rows.csv", body, "text/csv")
    _name, file_type, data, _title = fetch_url_document(server.url("/rows.csv"), LOOPBACK)
    assert (file_type, data) == ("csv", body)


LEGACY_AND_AUDIO = ["doc", "xls", "ppt", "mp3", "wav", "flac", "ogg", "m4a"]


@pytest.mark.parametrize("kind", LEGACY_AND_AUDIO)
def test_a_legacy_office_file_or_a_recording_served_as_octet_stream_is_imported_as_its_kind(
    server, kind: str
) -> None:
    """An OLE file is told by the stream its directory names, audio by its magic bytes (they had been
    refused as unsupported, though both are importable)."""
    from project_paths import CORPUS

    found = sorted(CORPUS.glob(f"*.{kind}"))
    if not found:
        pytest.skip(f"no .{kind} in the corpus")
    body = found[0].read_bytes()
    server.body("/fetch", body, "application/octet-stream")
    name, file_type, data, _title = fetch_url_document(server.url("/fetch"), LOOPBACK)
    assert (name, file_type, data) == (f"fetch.{kind}", kind, body)


@pytest.mark.parametrize("brand", [b"mp42", b"isom", b"qt  ", b"3gp4", b"heic"])
def test_a_video_or_photo_in_an_iso_media_box_served_as_octet_stream_is_not_taken_for_audio(
    server, brand: bytes
) -> None:
    """Only an `ftyp` box naming an audio brand is m4a: video is not imported (nor sent to transcription)."""
    body = b"\x00\x00\x00\x18ftyp" + brand + b"\x00\x00\x02\x00isomavc1" + bytes(range(256)) * 4
    server.body("/clip", body, "application/octet-stream")
    name, file_type, _data, _title = fetch_url_document(server.url("/clip"), LOOPBACK)
    assert (name, file_type) == ("download", "")
