"""Issue 12 benchmark: end to end, upload to searchable, our local stack against LlamaIndex.

    .venv/bin/python bench/bench_e2e_llamaindex.py [--corpus DIR] [--files GLOB...] [--peer-venv DIR]
        [--workers N] [--skip-peer] [--timeline] [--rounds N] [--no-int8-peer]

The peer venv is /work/shared/peer-bench's (`bash make_venv.sh DIR`; it carries onnxruntime and
tokenizers through markitdown[all]); default DIR: $WEKNORA_PEER_VENV, else .peer-venv in the repository.

The documents (issue 27: any folder): `--corpus DIR` (default: the dev corpus) and `--files GLOB...`,
patterns relative to it (default: the DOCS list below, twenty dev-corpus documents of the types MarkItDown
reads; with `--corpus` alone, every file of the folder). Before any clock, MarkItDown reads every file in
the peer venv (untimed): a file it cannot read (an error, or no text), or whose type our API does not
import, is named with the reason and left out of both sides, so both sides read the same files. The bench
prints the count per type.

- ours: the local stack as `make run` starts it (moto in server mode in a process of its own, the real
  queues, handlers and state machine, the embedded index) with its pollers in the background and the
  embedding workers the local runtime runs (one single-threaded process per core, at most 2), the default
  knowledge base (WeKnora's default chunking, 512/80 runes, and the int8-arithmetic MiniLM). The clock
  runs from the first upload until every document is enabled (searchable: embedded and indexed; the
  knowledge base's rows are listed every 0.5 s); then one search through the API proves it. `--timeline`
  prints each document's stage spans (seconds after the first upload) with the waits between them (queue
  and poller hand-offs), the sums per stage and per wait, each upload request's time and each process's
  CPU seconds.
- LlamaIndex (bench/peer_llamaindex_e2e.py in the peer venv): MarkItDown, an IngestionPipeline with
  SentenceSplitter and the shipped MiniLM ONNX file (the one our stack quantises; same tokenizer and
  pooling), a VectorStoreIndex, one retrieval. Two granularities: *matched* (SentenceSplitter's chunk size
  found by bisection on MarkItDown's texts so that it makes about as many nodes as we make chunks) and
  *default* (512 tokens / 50 overlap: the peer-bench setting, against which our default chunking makes
  ~3x more chunks to embed). Also once with our int8-arithmetic file at matched granularity, to separate
  the model from the pipeline (`--no-int8-peer` leaves it out).

Models are loaded before the clock on both sides (LlamaIndex's MarkItDown is warmed up too). `--rounds N`
interleaves N rounds (ours, then each LlamaIndex configuration) and reports medians: one round moves by
±15% with the load of the shared 2-core machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from local_stack import new_tenant_kb, start_local_stack, warmed_embedding_model  # noqa: E402

from chalicelib.domain.filetypes import file_type_of, is_importable  # noqa: E402
from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

CORPUS = default_corpus(ROOT)
TOKENIZER = ROOT / "chalicelib" / "adapters" / "models" / "minilm_tokenizer.json"
STAGES = ("docreader", "chunking", "embedding")

DOCS = [
    "lppl.pdf",
    "screenplay-example.pdf",
    "theatre-help.pdf",
    "python-howto-sorting.docx",
    "debian-faq-pkg-basics.docx",
    "python-tutorial-controlflow.docx",
    "debian-faq-basic-defs.ko.docx",
    "debian-faq-pkgtools.en.html",
    "debian-faq-software.ko.html",
    "debian-faq-ftparchives.ko.html",
    "debian-faq-support.htm",
    "python-howto-sorting.htm",
    "dotenv-README.md",
    "debug-README.md",
    "debian-faq-getting-debian.md",
    "man-regex.7.txt",
    "python-tutorial-introduction.txt",
    "korean-bill-1809890.ko.txt",
    "debian-faq-basic-defs.pptx",
    "statsmodels-statecrime.csv",
]


def select_files(corpus: Path, patterns: list[str] | None) -> list[Path]:
    """The files of `corpus` the patterns name (relative to it, `**` reaches into folders), in order and
    once each; without patterns the DOCS list for the dev corpus, else every file of the folder."""
    if not patterns:
        if corpus.resolve() == CORPUS.resolve():
            return [CORPUS / name for name in DOCS]
        patterns = ["**/*"]
    chosen: dict[Path, None] = {}
    for pattern in patterns:
        found = sorted(f for f in corpus.glob(pattern) if f.is_file())
        if not found and (corpus / pattern).is_file():
            found = [corpus / pattern]
        if not found:
            raise SystemExit(f"--files {pattern!r} names no file under {corpus}")
        chosen.update(dict.fromkeys(found))
    return list(chosen)


def readable_files(venv: Path, files: list[Path], texts_file: Path) -> tuple[list[Path], dict[str, str]]:
    """The files both sides can read (untimed): our API imports the type and MarkItDown reads text from
    it; every other file with the reason it is left out."""
    left_out: dict[str, str] = {}
    kept = []
    for f in files:
        if is_importable(file_type_of(f.name)):
            kept.append(f)
        else:
            left_out[str(f)] = f"our API does not import .{file_type_of(f.name) or '(no extension)'}"
    unreadable = run_peer(venv, "--probe", str(texts_file), *map(str, kept))["unreadable"]
    left_out.update({name: f"MarkItDown: {why}" for name, why in unreadable.items()})
    return [f for f in kept if str(f) not in left_out], left_out


def per_type(files: list[Path] | list[str]) -> str:
    counts = collections.Counter(file_type_of(Path(f).name) or "(none)" for f in files)
    return ", ".join(f"{ext} {n}" for ext, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process and each child, by role (Linux /proc; empty elsewhere):
    on 2 shared cores the end-to-end time is bounded by the CPU all of them need."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    me = os.getpid()
    found: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        fields = text[text.rindex(")") + 2 :].split()
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid != me and ppid != me:
            continue
        if pid == me:
            role = "this process (API, pollers, stages)"
        elif "moto_server" in cmdline:
            role = "moto"
        elif "spawn_main" in cmdline:
            role = "embedding workers"
        else:
            role = "other children"
        found[role] = found.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return found


class RequestCounter:
    """Counts this process's AWS requests by service and operation, and by the function that made them
    (outside an invocation: the pollers' receives and the bench's observer, one Query a look): each is a
    request moto answers."""

    def __init__(self) -> None:
        import botocore.client

        from chalicelib.local.aws_calls import _function

        self.counts: collections.Counter[str] = collections.Counter()
        self.by_function: collections.Counter[str] = collections.Counter()
        self._client = botocore.client.BaseClient
        # botocore-stubs leave out the private method every client call goes through, patched here
        self._original: Callable[[Any, str, Any], Any] = self._client._make_api_call  # type: ignore[attr-defined]
        counts, by_function, original = self.counts, self.by_function, self._original

        def counted(client: Any, operation: str, params: Any) -> Any:
            call = f"{client.meta.service_model.service_name}.{operation}"
            counts[call] += 1
            table = params.get("TableName", "") if isinstance(params, dict) else ""
            by_function[f"{_function.get() or '(no function)'} {call} {table}".strip()] += 1
            return original(client, operation, params)

        self._client._make_api_call = counted  # type: ignore[attr-defined]  # not in the stubs (above)

    def close(self) -> None:
        self._client._make_api_call = self._original  # type: ignore[attr-defined]  # not in the stubs


def ours(files: list[Path], workers: int | None) -> dict[str, Any]:
    from chalice.test import Client
    from e2e.conftest import multipart  # the same multipart body the end-to-end tests send

    from chalicelib.bootstrap import get_deps
    from chalicelib.domain.types import EnableStatus, ParseStatus

    runtime = start_local_stack(Path(tempfile.mkdtemp(prefix="bench-e2e-")), embed_workers=workers)
    try:
        deps = get_deps()
        model = warmed_embedding_model(deps)  # worker processes start and load the model
        with Client(runtime.app, stage_name="local", project_dir=str(ROOT)) as client:
            headers, kb = new_tenant_kb(client, "bench-e2e")
            runtime.start_workers()
            requests = RequestCounter()
            cpu_before = _cpu_seconds()
            started = time.monotonic()
            started_at = datetime.now(UTC)
            ids = []
            upload_seconds = []
            uploaded_at: dict[str, float] = {}
            refused: dict[str, str] = {}
            for path in files:
                upload_started = time.monotonic()
                body, content_type = multipart({"file": (path.name, path.read_bytes())}, {})
                response = client.http.post(
                    f"/api/v1/knowledge-bases/{kb['id']}/knowledge/file",
                    headers={**headers, "Content-Type": content_type},
                    body=body,
                )
                upload_seconds.append(time.monotonic() - upload_started)
                if response.status_code >= 400:  # e.g. a second file of the same content (deduplicated)
                    refused[path.name] = f"{response.status_code} {response.body[:200]!r}"
                    continue
                ids.append(response.json_body["data"]["id"])
                uploaded_at[ids[-1]] = time.monotonic() - started
            pending = set(ids)
            rows = {}
            seen_at: dict[str, float] = {}
            while pending:
                # One query of the knowledge base's rows per look, not a read per row: the observer's own
                # requests go through the same emulator as the pipeline's (at 20 reads a look, they were a
                # seventh of its DynamoDB requests)
                for row in deps.knowledge.page_by_kb(kb["id"], limit=len(files) + 1):
                    if row.id in pending and (
                        row.enable_status == EnableStatus.ENABLED
                        or row.parse_status in (ParseStatus.FAILED, ParseStatus.CANCELLED)
                    ):
                        rows[row.id] = row
                        pending.discard(row.id)
                        seen_at[row.id] = time.monotonic() - started
                if time.monotonic() - started > 3600:
                    raise TimeoutError(f"{len(pending)} documents not searchable after an hour")
                time.sleep(0.5)
            elapsed = time.monotonic() - started
            cpu_after = _cpu_seconds()
            requests.close()
            search = client.http.post(
                f"/api/v1/knowledge-bases/{kb['id']}/hybrid-search",
                headers={**headers, "Content-Type": "application/json"},
                body=json.dumps({"query_text": "how to install a package"}),
            )
        runtime.stop_workers()
        stage_seconds: dict[str, float] = {}
        wait_seconds: dict[str, float] = {}
        timeline: list[str] = []
        for row in rows.values():
            marks = []
            # the hand-offs: upload answered -> docreader begins -> ... -> embedding ends -> seen enabled
            previous, previous_end = "upload", uploaded_at[row.id]
            for span in sorted(
                (s for s in deps.spans.list(row.id, row.attempt) if s.span_id in STAGES),
                key=lambda s: STAGES.index(s.span_id),
            ):
                if not (span.started_at and span.ended_at):
                    continue
                begin = (span.started_at - started_at).total_seconds()
                took = (span.ended_at - span.started_at).total_seconds()
                stage_seconds[span.span_id] = stage_seconds.get(span.span_id, 0.0) + took
                wait = f"{previous}>{span.span_id}"
                wait_seconds[wait] = wait_seconds.get(wait, 0.0) + begin - previous_end
                marks.append(
                    f"(wait {begin - previous_end:4.1f}) {span.span_id} {begin:5.1f}-{begin + took:5.1f}"
                )
                previous, previous_end = span.span_id, begin + took
            seen = seen_at[row.id]
            wait_seconds[f"{previous}>seen"] = wait_seconds.get(f"{previous}>seen", 0.0) + seen - previous_end
            marks.append(f"(wait {seen - previous_end:4.1f}) seen {seen:5.1f}")
            timeline.append(f"  {row.file_name:36} up {uploaded_at[row.id]:5.1f} " + "  ".join(marks))
        chunks = [c for i in ids for c in deps.chunks.list(i)]
        text_chunks = [c for c in chunks if c.chunk_type.value == "text"]
        failed = [r.file_name for r in rows.values() if r.enable_status != EnableStatus.ENABLED]
        return {
            "docs": len(ids),
            "failed": failed + [f"{name} (upload refused: {why})" for name, why in refused.items()],
            "chunks": len(text_chunks),
            "mean_chunk_chars": sum(len(c.content) for c in text_chunks) / max(1, len(text_chunks)),
            "total_s": elapsed,
            "embed_workers": runtime.embed_workers,
            "model": model.model_id,
            "search_status": search.status_code,
            "search_hits": len((search.json_body or {}).get("data") or []),
            "stage_seconds": {k: round(v, 1) for k, v in stage_seconds.items()},
            "wait_seconds": {k: round(v, 1) for k, v in wait_seconds.items()},
            "timeline": sorted(timeline),
            "upload_seconds": [round(u, 2) for u in upload_seconds],
            "cpu_seconds": {k: round(v - cpu_before.get(k, 0.0), 1) for k, v in cpu_after.items()},
            "requests": dict(requests.counts.most_common()),
            "requests_by_function": dict(requests.by_function.most_common(30)),
            "invocations": {p.function_name: p.invocations for p in runtime.pollers},
        }
    finally:
        runtime.stop()


def run_peer(venv: Path, *arguments: str) -> dict[str, Any]:
    """bench/peer_llamaindex_e2e.py in the peer venv: its last line of output, parsed (its error shown)."""
    command = [str(venv / "bin" / "python"), str(ROOT / "bench" / "peer_llamaindex_e2e.py"), *arguments]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"the LlamaIndex side failed ({venv}):\n{out.stderr[-3000:]}")
    # the whole process's CPU seconds (model loading and MarkItDown's warm-up included, so an upper bound)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_cpu_s": cpu}


def peer(venv: Path, files: list[Path], model: Path, chunk_size: int, overlap: int) -> dict[str, Any]:
    return run_peer(
        venv,
        *("--model", str(model), "--tokenizer", str(TOKENIZER)),
        *("--chunk-size", str(chunk_size), "--chunk-overlap", str(overlap)),
        *map(str, files),
    )


def matched_size(venv: Path, texts_file: Path, chunks: int) -> tuple[int, int, int]:
    """SentenceSplitter's (chunk size, overlap, nodes) closest to our chunk count on MarkItDown's texts."""
    found = run_peer(venv, "--texts", str(texts_file), "--match-nodes", str(chunks))
    return int(found["chunk_size"]), int(found["chunk_overlap"]), int(found["nodes"])


def main() -> None:
    parser = argparse.ArgumentParser()
    default_venv = os.environ.get("WEKNORA_PEER_VENV") or str(ROOT / ".peer-venv")
    parser.add_argument("--peer-venv", type=Path, default=Path(default_venv))
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the folder (default: the dev corpus)")
    parser.add_argument(
        "--files",
        nargs="+",
        metavar="GLOB",
        help="files of --corpus (globs relative to it; default: DOCS, or every file of another folder)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="embedding workers (default: the runtime's)"
    )
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--no-int8-peer", action="store_true", help="leave out LlamaIndex with our int8 file")
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="print each document's stage spans and waits, each upload's time and each process's CPU seconds",
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians are reported)")
    parser.add_argument("--matched-chunk-size", type=int, default=0, help="tokens (default: from our chunks)")
    args = parser.parse_args()

    from chalicelib.adapters.models.local_onnx import MiniLmEmbedding, _default_model

    shipped_file = _default_model()[0]
    qint8_file = MiniLmEmbedding().model_file()  # built now (install step) if not cached: not timed
    files = select_files(args.corpus, args.files)
    texts_file = Path(tempfile.mkdtemp(prefix="bench-e2e-texts-")) / "markitdown.json"
    if args.skip_peer and not args.peer_venv.is_dir():
        left_out: dict[str, str] = {}
    else:
        files, left_out = readable_files(args.peer_venv, files, texts_file)
    print(f"{len(files)} documents from {args.corpus}: {per_type(files)}")
    if left_out:
        print(f"left out of both sides ({len(left_out)}: {per_type(list(left_out))}):")
        for name, why in left_out.items():
            print(f"  {Path(name).name}: {why}")
    if not files:
        raise SystemExit("no document both sides read")
    print(f"load (uptime): {os.getloadavg()}; CPU: {cpu_model()}", flush=True)

    ours_s: list[float] = []
    peers_s: dict[str, list[float]] = {}
    matched: tuple[int, int, int] | None = None
    for round_no in range(1, args.rounds + 1):
        us = ours(files, args.workers)
        ours_s.append(us["total_s"])
        print(
            f"round {round_no} ours: {us['docs']} docs, {us['chunks']} chunks "
            f"(mean {us['mean_chunk_chars']:.0f} chars), {us['total_s']:.1f} s upload to searchable; "
            f"{us['embed_workers']} embedding workers, {us['model']}; failed {us['failed']}; "
            f"search {us['search_status']} with {us['search_hits']} hits; "
            f"stage seconds summed over documents {us['stage_seconds']}; waits {us['wait_seconds']}; "
            f"CPU-s {sum(us['cpu_seconds'].values()):.1f}; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if args.timeline:
            print("seconds after the first upload, per document:", *us["timeline"], sep="\n")
            print("upload request seconds:", us["upload_seconds"])
            print(f"CPU seconds while the clock ran ({os.cpu_count()} cores):", us["cpu_seconds"])
            print(f"AWS requests while the clock ran ({sum(us['requests'].values())}):", us["requests"])
            print("the most frequent, by function:", *us["requests_by_function"].items(), sep="\n  ")
            print("invocations per function (this round's stack):", us["invocations"])
        if args.skip_peer:
            continue
        if matched is None:
            if args.matched_chunk_size:
                size = args.matched_chunk_size
                matched = (size, max(10, size // 10), 0)
            else:
                matched = matched_size(args.peer_venv, texts_file, us["chunks"])
        size, overlap, _ = matched
        runs = {
            f"LlamaIndex matched ({size}/{overlap} tokens), shipped file": (shipped_file, size, overlap),
            "LlamaIndex default (512/50 tokens), shipped file": (shipped_file, 512, 50),
        }
        if not args.no_int8_peer:
            runs[f"LlamaIndex matched ({size} tokens), our int8-arithmetic file"] = (
                qint8_file,
                size,
                overlap,
            )
        for label, (model_file, chunk_size, peer_overlap) in runs.items():
            r = peer(args.peer_venv, files, model_file, chunk_size, peer_overlap)
            peers_s.setdefault(label, []).append(r["total_s"])
            print(
                f"round {round_no} {label}: {r['docs']} docs, {r['nodes']} nodes "
                f"(mean {r['mean_node_chars']:.0f} chars), {r['total_s']:.1f} s (parse {r['parse_s']:.1f}, "
                f"pipeline {r['pipeline_s']:.1f}, index {r['index_s']:.1f}); failed {r['failed']}; "
                f"ratio ours {r['total_s'] / us['total_s']:.2f}x; its process {r['process_cpu_s']:.1f} CPU-s "
                f"(ours {sum(us['cpu_seconds'].values()):.1f}); load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    ours_median = statistics.median(ours_s)
    print(f"\nours: median {ours_median:.1f} s of {[round(t, 1) for t in ours_s]}")
    if not peers_s:
        return
    print("summary (median LlamaIndex time / median of ours; goal >= 3x matched, >= 1.5x default):")
    for label, times in peers_s.items():
        median = statistics.median(times)
        print(
            f"  {label:62} {median:6.1f} s  {median / ours_median:5.2f}x  rounds {[round(t, 1) for t in times]}"
        )


def cpu_model() -> str:
    """The CPU's model name and whether it has the int8 dot-product instructions (VNNI) or only AVX2."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line), "?")
    flags = next(
        (line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []
    )
    kind = [f for f in ("avx512_vnni", "avx_vnni", "avx512f", "avx2") if f in flags]
    return f"{name} ({', '.join(kind) or 'no AVX2'})"


if __name__ == "__main__":
    main()
