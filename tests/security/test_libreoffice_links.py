"""LibreOffice converts a .doc/.ppt offline and without our environment (libreoffice.convert_with_libreoffice).

Regression (found by an audit): a .doc holding a linked picture (http://127.0.0.1:PORT/..., standing for
169.254.169.254 or a VPC host) was converted by LibreOffice, which fetched the picture itself, outside the
SSRF-safe client and its allow-list; and LibreOffice got the worker's whole environment (its AWS
credentials among it). Its throwaway profile now sends every URL it would fetch to a proxy that takes no
connection (127.0.0.1:9), and it gets PATH and the locale, HOME and TMPDIR in its temporary directory."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader, libreoffice
from chalicelib.parsers.libreoffice import convert_with_libreoffice
from chalicelib.ports import ReadRequest

from .test_libreoffice_local_files import word97_from

FAKE_SOFFICE = """#!{python}
import json, os, pathlib, sys
args = sys.argv[1:]
profile = pathlib.Path(args[0].split("file://", 1)[1])
captured = pathlib.Path({captured!r})
captured.joinpath("env.json").write_text(json.dumps(dict(os.environ)))
captured.joinpath("args.json").write_text(json.dumps(args))
captured.joinpath("profile.xcu").write_text((profile / "user" / "registrymodifications.xcu").read_text())
out = pathlib.Path(args[args.index("--outdir") + 1])
out.mkdir()
(out / "input.docx").write_bytes(b"converted")
"""


def test_libreoffice_gets_an_offline_profile_and_none_of_our_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "soffice"
    fake.write_text(FAKE_SOFFICE.format(python=sys.executable, captured=str(tmp_path)))
    fake.chmod(0o755)
    monkeypatch.setattr(libreoffice, "soffice_path", lambda: str(fake))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-of-the-worker")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-of-the-worker")
    monkeypatch.setenv("WEKNORA_MAX_FILE_SIZE", "52428800")

    word97 = (Path(__file__).parents[1] / "fixtures" / "doc" / "notes.doc").read_bytes()
    assert convert_with_libreoffice(word97, "doc", 30) == b"converted"
    # opened with the Word importer its version calls for, never one LibreOffice picks by the content
    assert "--infilter=MS Word 97" in json.loads((tmp_path / "args.json").read_text())

    env = json.loads((tmp_path / "env.json").read_text())
    assert not [name for name in env if name.startswith(("AWS_", "WEKNORA_"))]
    assert env["HOME"] == env["TMPDIR"] and Path(env["HOME"]).name.startswith("weknora-lo-")
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR"}
    settings = (tmp_path / "profile.xcu").read_text()
    for name, value in (
        ("ooInetProxyType", "2"),
        ("ooInetHTTPProxyName", "127.0.0.1"),
        ("ooInetHTTPProxyPort", "9"),
        ("ooInetHTTPSProxyName", "127.0.0.1"),
        ("ooInetHTTPSProxyPort", "9"),
        ("ooInetNoProxy", ""),
    ):
        assert f'<prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop>' in settings, name


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A loopback HTTP server standing for the metadata service: what LibreOffice asks it for."""
    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (100, 100), (200, 10, 10)).save(picture, "PNG")
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(picture.getvalue())))
            self.end_headers()
            self.wfile.write(picture.getvalue())

        def do_HEAD(self) -> None:
            asked.append(f"HEAD {self.path}")
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def _doc_with_linked_picture(url: str, work: Path) -> bytes:
    """A Word 97 file whose picture is a link to `url`, made by LibreOffice from HTML (its own profile)."""
    html = work / "src.html"
    html.write_text(f'<html><body><p><img src="{url}" width="100" height="100"></p></body></html>')
    return word97_from(html, work)


@pytest.mark.requires_libreoffice
def test_a_linked_picture_is_not_fetched_by_libreoffice(
    listener: tuple[int, list[str]], tmp_path: Path
) -> None:
    port, asked = listener
    data = _doc_with_linked_picture(f"http://127.0.0.1:{port}/latest/meta-data/x.png", tmp_path)
    asked.clear()  # LibreOffice fetched it while making the file: our conversion must not

    convert_with_libreoffice(data, "doc", 120)
    with contextlib.suppress(PermanentStageError):  # an image-only file may fail: the fetch is what counts
        build_docreader().read(ReadRequest(data=data, file_name="report.doc", file_type="doc", options={}))
    assert asked == []
