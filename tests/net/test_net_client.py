"""Safe HTTP client and URL import against a real loopback server (opened through the allow-list)."""

import socket

import pytest

from chalicelib.net import AllowList, FetchError, SafeHttpClient, fetch_url_document, is_file_url

LOOPBACK = AllowList.parse("127.0.0.0/8:*")


def test_fetch_through_allow_list(server) -> None:
    server.body("/hello.txt", b"hello world")
    resp = SafeHttpClient(LOOPBACK).get(server.url("/hello.txt"))
    assert resp.status == 200
    assert resp.body == b"hello world"
    assert resp.content_type == "text/plain"


def test_loopback_blocked_without_allow_list(server) -> None:
    server.body("/x", b"secret")
    with pytest.raises(FetchError) as err:
        SafeHttpClient(AllowList()).get(server.url("/x"))
    assert err.value.permanent
    assert server.seen == []  # never connected


def test_redirect_to_private_ip_is_blocked(server) -> None:
    server.redirect("/r", "http://169.254.169.254/latest/meta-data/")
    with pytest.raises(FetchError, match="redirect target blocked"):
        SafeHttpClient(LOOPBACK).get(server.url("/r"))
    server.redirect("/r2", "http://10.0.0.5:8080/")
    with pytest.raises(FetchError, match="redirect target blocked"):
        SafeHttpClient(LOOPBACK).get(server.url("/r2"))


def test_redirect_to_other_scheme_is_blocked(server) -> None:
    server.redirect("/r", "file:///etc/passwd")
    with pytest.raises(FetchError, match="redirect target blocked"):
        SafeHttpClient(LOOPBACK).get(server.url("/r"))


def test_redirects_followed_and_capped(server) -> None:
    server.body("/final", b"done")
    server.redirect("/a", "/b", 301)
    server.redirect("/b", server.url("/final"), 307)
    resp = SafeHttpClient(LOOPBACK).get(server.url("/a"))
    assert resp.body == b"done"
    assert len(resp.redirects) == 2
    server.redirect("/loop", "/loop")
    with pytest.raises(FetchError, match="too many redirects"):
        SafeHttpClient(LOOPBACK, max_redirects=3).get(server.url("/loop"))


def test_size_cap_declared_and_streamed(server) -> None:
    server.body("/big", b"x" * 5000)
    with pytest.raises(FetchError, match="larger than") as err:
        SafeHttpClient(LOOPBACK, max_bytes=1000).get(server.url("/big"))
    assert err.value.permanent

    def chunked(h) -> None:  # no Content-Length: the cap must hold while streaming
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.end_headers()
        for _ in range(20):
            h.wfile.write(b"y" * 500)
        h.close_connection = True

    server.routes["/stream"] = chunked
    with pytest.raises(FetchError, match="larger than"):
        SafeHttpClient(LOOPBACK, max_bytes=1000).get(server.url("/stream"))


def test_a_compressed_body_is_capped_as_it_inflates(server) -> None:
    """A gzip bomb (100 MB of zeros in ~100 KB): the cap counts inflated bytes and memory stays near the cap,
    never the whole bomb (urllib3 ≥ 2.6 inflates a streamed read a piece at a time: CVE-2025-66471)."""
    import gzip
    import tracemalloc

    bomb = gzip.compress(b"\0" * 100 * 2**20, compresslevel=9)

    def gzipped(h) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(bomb)))
        h.end_headers()
        h.wfile.write(bomb)

    server.routes["/bomb"] = gzipped
    tracemalloc.start()
    try:
        with pytest.raises(FetchError, match="larger than") as err:
            SafeHttpClient(LOOPBACK, max_bytes=2 * 2**20).get(server.url("/bomb"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.value.permanent and len(bomb) < 2**20
    assert peak < 16 * 2**20, peak


def test_http_errors_classified(server) -> None:
    with pytest.raises(FetchError) as err:
        SafeHttpClient(LOOPBACK).get(server.url("/missing"))
    assert err.value.status == 404 and err.value.permanent
    server.body("/busy", b"", status=503)
    with pytest.raises(FetchError) as err:
        SafeHttpClient(LOOPBACK).get(server.url("/busy"))
    assert err.value.status == 503 and not err.value.permanent


def test_auth_dropped_on_cross_origin_redirect(server, server_factory) -> None:
    other = server_factory()  # a different port is a different origin
    other.body("/landing", b"ok")
    server.body("/same", b"same")
    server.redirect("/go", other.url("/landing"))
    server.redirect("/stay", "/same")
    headers = {"Authorization": "Bearer secret", "Cookie": "sid=1", "X-Trace": "t"}
    SafeHttpClient(LOOPBACK).get(server.url("/go"), headers=headers)
    _path, seen = other.seen[-1]
    assert "authorization" not in seen and "cookie" not in seen
    assert seen["x-trace"] == "t"
    SafeHttpClient(LOOPBACK).get(server.url("/stay"), headers=headers)
    assert server.seen[-1][1]["authorization"] == "Bearer secret"  # same origin keeps it


def test_connection_is_pinned_to_validated_address(server, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: validation resolves rebind.test to loopback (allowed); any later lookup by the
    HTTP stack would get 10.255.255.1. The request must still reach the validated address."""
    server.body("/doc", b"pinned")
    real = socket.getaddrinfo

    def rebinding_getaddrinfo(host, *args, **kwargs):
        if host == "rebind.test":
            return real("10.255.255.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_getaddrinfo)
    client = SafeHttpClient(LOOPBACK, resolver=lambda host, port: ["127.0.0.1"], timeout=5)
    resp = client.get(f"http://rebind.test:{server.port}/doc")
    assert resp.body == b"pinned"
    assert server.seen[-1][1]["host"] == f"rebind.test:{server.port}"


def test_each_hop_is_resolved_again(server) -> None:
    """A name that answers loopback first and a private address next is caught on the redirect hop."""
    answers = iter([["127.0.0.1"], ["10.0.0.9"]])
    server.redirect("/first", f"http://flip.test:{server.port}/second")
    client = SafeHttpClient(LOOPBACK, resolver=lambda host, port: next(answers))
    with pytest.raises(FetchError, match="redirect target blocked"):
        client.get(f"http://flip.test:{server.port}/first")


def test_is_file_url() -> None:
    assert is_file_url("https://example.com/a/report.PDF")
    assert is_file_url("https://example.com/data.xlsx?download=1")
    assert not is_file_url("https://example.com/page.html")
    assert not is_file_url("https://example.com/blog/post")
    assert not is_file_url("https://example.com/video.mp4")


def test_fetch_url_document_file(server) -> None:
    server.body("/files/report.pdf", b"%PDF-1.4 fake", "application/pdf")
    name, file_type, data, title = fetch_url_document(server.url("/files/report.pdf"), LOOPBACK)
    assert (name, file_type, data, title) == ("report.pdf", "pdf", b"%PDF-1.4 fake", "")


def test_fetch_url_document_by_content_type(server) -> None:
    server.body("/download", b"a,b\n1,2\n", "text/csv; charset=utf-8")
    name, file_type, data, _title = fetch_url_document(server.url("/download"), LOOPBACK)
    assert file_type == "csv" and name == "download.csv" and data.startswith(b"a,b")


def test_fetch_url_document_page(server) -> None:
    paragraph = "Debian is a free operating system for your computer. " * 6
    page = (
        "<html><head><title>Debian Intro</title></head><body><nav>Home | About</nav>"
        f"<main><h1>About Debian</h1><p>{paragraph}</p><p>It ships 59000 packages.</p></main>"
        "<footer>Copyright</footer></body></html>"
    ).encode()
    server.body("/about", page, "text/html; charset=utf-8")
    name, file_type, data, title = fetch_url_document(server.url("/about"), LOOPBACK)
    text = data.decode()
    assert file_type == "md" and name.endswith(".md")
    assert title == "Debian Intro"
    assert "free operating system" in text and "59000 packages" in text
    assert "Home | About" not in text


def test_fetch_url_document_blocked_and_empty(server) -> None:
    with pytest.raises(FetchError) as err:
        fetch_url_document("http://169.254.169.254/latest/meta-data/", LOOPBACK)
    assert err.value.permanent
    server.body("/empty.pdf", b"", "application/pdf")
    with pytest.raises(FetchError, match="empty"):
        fetch_url_document(server.url("/empty.pdf"), LOOPBACK)


def test_a_page_trafilatura_fails_on_is_read_by_the_full_page_converter_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import trafilatura

    from chalicelib.net.client import FetchResponse
    from chalicelib.net.urlimport import _page_document

    def broken(*args: object, **kwargs: object) -> str:
        raise RecursionError("injected")

    monkeypatch.setattr(trafilatura, "extract", broken)
    body = b"<html><head><title>Plain</title></head><body><p>" + b"A paragraph of real words. " * 5 + b"</p>"
    response = FetchResponse("https://example.org/a", 200, {"content-type": "text/html"}, body)
    with caplog.at_level("WARNING"):
        _name, _kind, data, title = _page_document(response)
    assert title == "Plain" and b"A paragraph of real words." in data
    assert any("trafilatura failed" in r.getMessage() for r in caplog.records)
