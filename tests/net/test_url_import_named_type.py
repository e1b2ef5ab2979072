"""The importer's download mode: a type (or a file name) the tenant gave decides what the download is,
before the URL's extension, the Content-Type and the bytes; the file keeps the tenant's name."""

from chalicelib.net import AllowList, fetch_url_document
from chalicelib.net.urlimport import SafeUrlImporter

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
PDF = b"%PDF-1.4\n1 0 obj <</Type /Catalog>> endobj\n" + bytes(range(256)) * 8 + b"\n%%EOF\n"


def test_a_named_type_wins_over_the_extension_the_content_type_and_the_bytes(server) -> None:
    server.body("/files/report.pdf", PDF, "text/html")
    name, file_type, data, title = fetch_url_document(
        server.url("/files/report.pdf"), LOOPBACK, named_type="docx"
    )
    assert (name, file_type, data, title) == ("report.docx", "docx", PDF, "")  # the parser checks the bytes


def test_a_named_file_gives_its_type_and_its_name(server) -> None:
    server.body("/get", b"<p>not read as a page</p>", "text/html")
    importer = SafeUrlImporter(LOOPBACK)
    document = importer.fetch(server.url("/get?id=1"), file_name="minutes\u2028.md")
    assert (document.file_name, document.file_type, document.title) == ("minutes.md", "md", "")
    assert document.data == b"<p>not read as a page</p>"


def test_with_nothing_named_the_bytes_still_decide(server) -> None:
    server.body("/notes.txt", PDF, "text/plain")
    assert SafeUrlImporter(LOOPBACK).fetch(server.url("/notes.txt")).file_type == "pdf"
