"""Issue 12 benchmark: AWS cost per 1,000 ten-page documents, from the metered calls of a real run.

    .venv/bin/python bench/bench_cost.py [--docs 10] [--pages 10] [--load N]

`--load N` runs N busy processes (a pure-Python loop each) for the whole run: the priced figure must not
follow the machine's load, since locally a stage's Lambda time is its work (CPU time), not its wall time
(issue 27). Run it once without and once with `--load 2` and compare the two figures.

Generates text PDFs of `--pages` pages (corpus prose, ~350 words a page), sends them through the local stack
(moto in server mode, the real queues, handlers and state machine, the embedded index and the local MiniLM),
then reads `GET /knowledge/{id}/cost` for each: every SQS, DynamoDB, S3 and Step Functions call the workers
made, Lambda GB-seconds of their run time at each function's configured memory, the execution's state
transitions from its history. Lambda time here is this machine's (2 shared cores), not Lambda's. Model
tokens are reported apart (the local model costs nothing); the goal is <= $0.30 per 1,000 documents.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import multiprocessing
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from local_stack import new_tenant_kb, start_local_stack  # noqa: E402

from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

CORPUS = default_corpus(ROOT)


def prose() -> list[str]:
    words: list[str] = []
    for path in sorted(CORPUS.glob("*.md")) + sorted(CORPUS.glob("*.txt")):
        if not path.name.endswith(".truth.txt"):
            words += path.read_text(errors="replace").split()
    return [w for w in words if w.isascii()] or ["lorem", "ipsum", "dolor", "sit", "amet"]


def ten_page_pdf(words: list[str], start: int, pages: int) -> bytes:
    import pypdfium2 as pdfium
    import pypdfium2.raw as c

    pdf = pdfium.PdfDocument.new()
    cursor = start
    for number in range(pages):
        page = pdf.new_page(612, 792)
        y = 740.0
        for _line in range(50):  # ~7 words a line, ~350 words a page
            text = " ".join(words[(cursor + i) % len(words)] for i in range(7))
            cursor += 7
            obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(10))
            encoded = ctypes.create_string_buffer((text + "\0").encode("utf-16-le"))
            c.FPDFText_SetText(obj, ctypes.cast(encoded, ctypes.POINTER(c.FPDF_WCHAR)))
            c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 60, y)
            c.FPDFPage_InsertObject(page.raw, obj)
            y -= 13
        c.FPDFPage_GenerateContent(page.raw)
        del number
    buffer = io.BytesIO()
    pdf.save(buffer)
    return buffer.getvalue()


def spin() -> None:
    """A CPU load generator: busy until terminated."""
    while True:
        pass


def start_load(processes: int) -> list[multiprocessing.Process]:
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    return spinners


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--load", type=int, default=0, help="busy processes running during the run")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}; {args.load} busy processes during the run")
    spinners = start_load(args.load)

    import tempfile

    from chalice.test import Client
    from e2e.conftest import multipart  # the same multipart body the end-to-end tests send

    from chalicelib.bootstrap import get_deps

    runtime = start_local_stack(Path(tempfile.mkdtemp(prefix="bench-cost-")))
    try:
        with Client(runtime.app, stage_name="local", project_dir=str(ROOT)) as client:
            headers, kb = new_tenant_kb(client, "bench-cost")
            words = prose()
            ids = []
            started = time.monotonic()
            for n in range(args.docs):
                body, content_type = multipart(
                    {"file": (f"doc-{n}.pdf", ten_page_pdf(words, n * 5000, args.pages))}, {}
                )
                response = client.http.post(
                    f"/api/v1/knowledge-bases/{kb['id']}/knowledge/file",
                    headers={**headers, "Content-Type": content_type},
                    body=body,
                )
                ids.append(response.json_body["data"]["id"])
            runtime.drain(timeout=1800)
            elapsed = time.monotonic() - started
            reports = [
                client.http.get(f"/api/v1/knowledge/{i}/cost", headers=headers).json_body["data"] for i in ids
            ]
            statuses = Counter(
                client.http.get(f"/api/v1/knowledge/{i}", headers=headers).json_body["data"]["parse_status"]
                for i in ids
            )
        usage_entries = get_deps().usage.for_knowledge
        _ = [usage_entries(i) for i in ids]  # read before the stack stops
        entries = {i: usage_entries(i) for i in ids}
        load_during = os.getloadavg()
    finally:
        runtime.stop()
        for spinner in spinners:
            spinner.terminate()
            spinner.join()

    quantities: defaultdict[str, float] = defaultdict(float)
    dollars: defaultdict[str, float] = defaultdict(float)
    for report in reports:
        for line in report["lines"]:
            quantities[line["unit"]] += line["quantity"]
            dollars[line["unit"]] += line["dollars"]
    total = sum(r["aws_dollars"] for r in reports)
    per_thousand = total / len(reports) * 1000
    print(f"{len(reports)} documents x {args.pages} pages in {elapsed:.1f} s; status {dict(statuses)}")
    print(f"load average at the end of the run: {load_during}; {reports[0]['lambda_seconds_counted']}")
    print(f"prices as of {reports[0]['prices_as_of']}; {sum(r['workflow_pending'] for r in reports)} pending")
    print(f"{'unit':28} {'per document':>14} {'$ per 1,000 docs':>18}")
    for unit in sorted(quantities, key=lambda u: -dollars[u]):
        print(
            f"{unit:28} {quantities[unit] / len(reports):14.3f} {dollars[unit] / len(reports) * 1000:18.4f}"
        )
    stage_seconds: defaultdict[str, float] = defaultdict(float)
    for knowledge_id in ids:
        for entry in entries[knowledge_id]:
            stage_seconds[entry.stage] += entry.counts.get("lambda_gb_seconds", 0.0)
    print(
        "Lambda GB-seconds per document by stage:",
        {k: round(v / len(ids), 2) for k, v in stage_seconds.items()},
    )
    tokens = sum(line["quantity"] for r in reports for line in r["model_tokens"])
    print(
        f"AWS cost per 1,000 ten-page documents: ${per_thousand:.4f} (goal <= $0.30); model tokens: {tokens:g}"
    )


if __name__ == "__main__":
    main()
