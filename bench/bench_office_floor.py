#!/usr/bin/env python3
"""Where a docx/pptx read's time goes, against kreuzberg's whole read of the same file (issue 27 item 4).

    .venv/bin/python bench/bench_office_floor.py [--corpus DIR] [--repeat 15] [--kreuzberg-venv DIR]

Per corpus docx/pptx, each figure the best CPU time of `--repeat` calls in this process: our whole
`reader.read`; its parts that do not depend on how the reader walks the XML (the zip listing, the checks:
the central directory's claims and the checked inflating of every member the reader reads (guards.open_package
and PackageParts; members it does not read are not inflated), lxml parsing every XML part the reader asks the
package for, and for docx the body's XSLT pass); the rest (walking the trees, Markdown, freeing the trees); and kreuzberg's
whole read (its defaults, plain text, best of the same number of calls, through peer_kreuzberg_parse.py);
"kz/ours" is the ratio bench_parse.py reports (≥ 1: ours at least as fast).
"fixed/kz" ≥ 1 means the listing, the checks and lxml's tree builds alone take longer than kreuzberg's
whole read: no walk of those trees, however quick, brings that file to 1×.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_parse import DEFAULT_CORPUS, KreuzbergPeer, _load

from chalicelib.parsers import build_docreader, office, ooxml
from chalicelib.parsers.base import resolve_file_type
from chalicelib.parsers.guards import open_package
from chalicelib.parsers.reader import Limits
from chalicelib.ports import ReadRequest


def best_ms(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best * 1000


def parts_read(reader: Any, request: ReadRequest) -> tuple[list[str], list[str]]:
    """(the members one read asks its package for, the XML parts among them), in order."""
    blobs: list[str] = []
    xmls: list[str] = []
    original_blob, original_xml = ooxml.Package.blob, ooxml.Package.xml

    def recording_blob(self: ooxml.Package, name: str) -> Any:
        blobs.append(name)
        return original_blob(self, name)

    def recording_xml(self: ooxml.Package, name: str) -> Any:
        xmls.append(name)
        return original_xml(self, name)

    ooxml.Package.blob = recording_blob  # type: ignore[method-assign]
    ooxml.Package.xml = recording_xml  # type: ignore[method-assign]
    try:
        reader.read(request)
    finally:
        ooxml.Package.blob = original_blob  # type: ignore[method-assign]
        ooxml.Package.xml = original_xml  # type: ignore[method-assign]
    return blobs, xmls


def measure(path: Path, reader: Any, peer: KreuzbergPeer, repeat: int) -> list[float]:
    """[ours, listing, preflight, lxml, xslt, fixed, rest, kreuzberg] for one file, in ms."""
    ft = path.suffix[1:]
    data = path.read_bytes()
    limits = Limits()
    request = ReadRequest(data=data, file_name=path.name, file_type=ft)
    ours = best_ms(lambda: reader.read(request), repeat)
    listing: list[Any] = []
    listed = best_ms(lambda: resolve_file_type(data, ft, []), repeat)
    resolve_file_type(data, ft, listing)
    asked, names = parts_read(reader, request)  # the package's .rels, the main part, …, images

    def check() -> Any:
        package = open_package(data, ft, limits, listing)
        assert package is not None
        for name in dict.fromkeys(asked):
            if name in package.infos:
                package[name]
        return package

    checked = best_ms(check, repeat)
    parts = check()
    blobs = [parts[name] for name in names if name in parts.infos]
    parsed = best_ms(lambda: [ooxml.etree.fromstring(b, ooxml._PARSER) for b in blobs], repeat)
    transform = 0.0
    if ft == "docx":
        body = ooxml.etree.fromstring(parts[names[1]], ooxml._PARSER)
        transform = best_ms(lambda: office._DOCX_BODY_XSLT(body), repeat)
    kz = min(peer.extract(path, ft)["cpu_s"] * 1000 for _ in range(repeat))
    fixed = listed + checked + parsed + transform
    return [ours, listed, checked, parsed, transform, fixed, ours - fixed, kz]


def _row(label: str, v: list[float]) -> str:
    return (
        f"{label[:34]:34} {v[0]:6.2f} {v[1]:5.2f} {v[2]:5.2f} {v[3]:6.2f} {v[4]:5.2f} {v[5]:6.2f} {v[6]:6.2f} "
        f"{v[7]:6.2f} {v[5] / v[7]:8.2f} {v[7] / v[0]:7.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument(
        "--kreuzberg-venv",
        type=Path,
        default=Path(os.environ.get("WEKNORA_KREUZBERG_VENV") or "/tmp/kreuzberg-venv"),
    )
    a = ap.parse_args()
    reader = build_docreader()
    peer = KreuzbergPeer(a.kreuzberg_venv)
    print(f"load {_load()}; best CPU ms of {a.repeat} calls; kreuzberg {peer.version} (its defaults)")
    print(
        f"{'file':34} {'ours':>6} {'list':>5} {'prefl':>5} {'lxml':>6} {'xslt':>5} {'fixed':>6} {'rest':>6} "
        f"{'kz':>6} {'fixed/kz':>8} {'kz/ours':>7}"
    )
    sums: dict[str, list[float]] = {}
    try:
        for path in sorted(p for p in a.corpus.iterdir() if p.suffix in (".docx", ".pptx")):
            row = measure(path, reader, peer, a.repeat)
            sums[path.suffix] = [
                s + v for s, v in zip(sums.get(path.suffix, [0.0] * len(row)), row, strict=True)
            ]
            print(_row(path.name, row), flush=True)
    finally:
        peer.close()
    for suffix, total in sorted(sums.items()):
        print(_row("sum " + suffix[1:], total))
    print(f"load {_load()}")


if __name__ == "__main__":
    main()
