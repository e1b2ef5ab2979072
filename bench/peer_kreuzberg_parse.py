"""The kreuzberg side of bench_parse.py's `--kreuzberg` section; runs in a venv with kreuzberg (Rust core),
never imports chalicelib.

    python3 -m venv /tmp/kreuzberg-venv && /tmp/kreuzberg-venv/bin/pip install 'kreuzberg>=4.10,<4.11'
    KREUZBERG_VENV/bin/python bench/peer_kreuzberg_parse.py [--like-ours]   # then JSON lines on stdin

A long-lived worker so that bench_parse.py can interleave its rounds with ours on a loaded machine: each
stdin line is {"path": FILE, "type": EXT}; the file is read before the clock, `extract_bytes_sync` runs
with the cache off, and one JSON line comes back: {"wall_s", "cpu_s", "status", "text"}. The first line
out is {"ready": true, "version": ...} once kreuzberg is imported.

`--like-ours` asks kreuzberg for what our reader gives: Markdown (`output_format="markdown"`: headings,
tables, lists) and the document's images (`ImageExtractionConfig(extract_images=True)`); without it,
kreuzberg's defaults (plain text; images only where a format's extractor takes them anyway, as docx's).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MIME = {
    "pdf": "application/pdf",
    "doc": "application/msword",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "ppt": "application/vnd.ms-powerpoint",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xls": "application/vnd.ms-excel",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html",
    "htm": "text/html",
    "mhtml": "message/rfc822",
    "epub": "application/epub+zip",
    "csv": "text/csv",
    "txt": "text/plain",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "json": "application/json",
}


def main() -> None:
    import kreuzberg
    from kreuzberg import ExtractionConfig, ImageExtractionConfig, extract_bytes_sync

    if "--like-ours" in sys.argv[1:]:
        config = ExtractionConfig(
            use_cache=False,
            output_format="markdown",
            images=ImageExtractionConfig(extract_images=True),
        )
    else:
        config = ExtractionConfig(use_cache=False)
    print(json.dumps({"ready": True, "version": getattr(kreuzberg, "__version__", "?")}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        with open(job["path"], "rb") as fh:
            data = fh.read()
        reply: dict[str, Any]
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            result = extract_bytes_sync(
                data, MIME.get(job["type"], "application/octet-stream"), config=config
            )
            reply = {"status": "ok", "text": result.content or "", "images": len(result.images or [])}
        except Exception as exc:  # the bench records any failure of the peer as its status
            reply = {"status": "error", "text": f"{type(exc).__name__}: {str(exc)[:160]}"}
        reply["wall_s"] = time.perf_counter() - t0
        reply["cpu_s"] = time.process_time() - c0
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
