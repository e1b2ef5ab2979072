#!/usr/bin/env python3
"""Chunker throughput: our WeKnora-grade chunker (pure Python) against the peers, side by side in ONE run.

Two document sets: "corpus", the .md/.markdown/.txt files of the dev corpus, and "tables", parser output
with tables: the corpus's CSV, XLSX and JSON files rendered to Markdown by our own docreader (pipe tables,
as the chunking stage receives them; the 50,000-row Debian package CSV among them). A third set, "bigcsv"
(not in the default sets), is issue 12's case: a generated 3 MB, 60,000-row CSV as our CSV parser renders
it. All are normalised with our normalise_markdown; the peers get the same text. Two modes at equivalent settings:

  char   512 runes / 80 overlap   ours (recursive, auto, heading, heuristic) vs LangChain RecursiveCharacterTextSplitter(len),
                                  chonkie RecursiveChunker/TokenChunker("character"), semchunk(len)
  token  512 tokens / 50 overlap  tiktoken cl100k_base (the copy llama-index-core ships, as bench_chunk.py);
                                  ours with a TokenCounter vs LangChain.from_tiktoken_encoder,
                                  chonkie RecursiveChunker/TokenChunker(enc), semchunk(enc)

plus floors (str.split, one tiktoken encode_ordinary pass). The summary gives each row's ratio to every
peer, to the fastest peer and to str.split. Every factory runs outside the timed region and
is rebuilt each round (no caches carried across rounds, same rule as peer-bench/bench_chunk.py); per
document the median over rounds is kept; MB/s = MB of UTF-8 / sum of per-document medians ("rounds
min-max" is the spread: the slowest and fastest round's summed per-document times). One extra
row, "warm counter", reuses our TokenCounter across rounds (what a long-lived worker sees); it is shown
for information and excluded from the ratios.

The peers are not project dependencies: run it with the peer venv, e.g.

    bash /work/shared/peer-bench/make_venv.sh /tmp/peers     # or pip install the chunking peers only
    /tmp/peers/bin/pip install markdown-it-py                # our chunker's one extra dependency
    /tmp/peers/bin/python bench/bench_chunker.py [--rounds 3] [--modes char,token] [--sets corpus,tables,bigcsv]

`--baseline REF` adds "ours recursive @REF": the chunker of a git revision (exported with `git archive`
and imported beside this tree's), interleaved with everything else, for before/after figures of one run.

Without the peers installed only our chunker and the str.split floor are measured. The tables set is
rendered by the project's docreader; when the running interpreter lacks the parser dependencies (the peer
venv), the project venv (.venv) renders it in a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Idle OpenBLAS worker threads (numpy is imported by us and by peers) spin on a 2-core box: one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from order_export import orders_csv  # noqa: E402  (the generator the table tests use)

from chalicelib.chunker import (  # noqa: E402
    ChunkingConfig,
    TokenCounter,
    normalise_markdown,
    split,
)
from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

CORPUS = default_corpus(ROOT)
PEER_BENCH = Path("/work/shared/peer-bench")
EXTS = (".md", ".markdown", ".txt")
TABLE_TYPES = ("csv", "xlsx", "json")
SETTINGS = {"char": (512, 80), "token": (512, 50)}

Factory = Callable[[], Callable[[str], list[str]]]


def load_docs(corpus: Path) -> list[tuple[str, str]]:
    docs = []
    for p in sorted(corpus.iterdir()):
        if p.name.endswith(".truth.txt") or not p.name.endswith(EXTS):
            continue
        t = normalise_markdown(p.read_text(encoding="utf-8", errors="replace"))
        if t.strip():
            docs.append((p.name, t))
    return docs


def render_tables(corpus: Path) -> list[tuple[str, str]]:
    """The corpus's CSV/XLSX/JSON files as our docreader renders them (Markdown with pipe tables)."""
    try:
        from chalicelib.parsers import build_docreader
        from chalicelib.ports import ReadRequest

        reader = build_docreader()  # imports every engine's parser library
    except ImportError:
        venv_python = ROOT / ".venv" / "bin" / "python"
        out = subprocess.run(
            [str(venv_python), __file__, "--render-tables", "--corpus", str(corpus)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [(name, text) for name, text in json.loads(out)]
    docs = []
    for p in sorted(corpus.iterdir()):
        ext = p.suffix.lower().lstrip(".")
        if ext not in TABLE_TYPES:
            continue
        md = reader.read(ReadRequest(data=p.read_bytes(), file_name=p.name, file_type=ext)).markdown
        if md.strip():
            docs.append((p.name, normalise_markdown(md)))
    return docs


def render_big_csv(corpus: Path) -> list[tuple[str, str]]:
    """The 60,000-row CSV as our CSV parser renders it (one pipe table, a 159-rune header)."""
    try:
        from chalicelib.parsers.simple import csv_to_markdown
    except ImportError:
        venv_python = ROOT / ".venv" / "bin" / "python"
        out = subprocess.run(
            [str(venv_python), __file__, "--render-big-csv"], check=True, capture_output=True, text=True
        ).stdout
        return [(name, text) for name, text in json.loads(out)]
    return [("orders-60000.csv", normalise_markdown(csv_to_markdown(orders_csv(60_000), 10**9)))]


def tiktoken_encoding() -> Any:
    sys.path.insert(0, str(PEER_BENCH))
    try:
        from common import use_bundled_tiktoken_cache

        use_bundled_tiktoken_cache()
    except ImportError:
        pass
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


def ours(mode: str, strategy: str, enc: Any, parent_child: bool = False, warm: bool = False) -> Factory:
    size, overlap = SETTINGS[mode]
    cfg = ChunkingConfig(chunk_size=size, chunk_overlap=overlap, strategy=strategy)
    shared = TokenCounter.from_encoding(enc) if warm else None

    def factory() -> Callable[[str], list[str]]:
        counter = shared or (TokenCounter.from_encoding(enc) if mode == "token" else None)
        if parent_child:
            from chalicelib.chunker import split_parent_child

            cfg.parent_chunk_size, cfg.child_chunk_size = 4 * size, size
            return lambda t: [
                c.piece.content for c in split_parent_child(t, cfg, length_function=counter).children
            ]
        return lambda t: [c.content for c in split(t, cfg, length_function=counter)]

    return factory


def load_baseline(ref: str) -> Any:
    """The `chalicelib.chunker` package of git revision `ref`, loaded beside this tree's: exported to a
    temporary directory, imported under the same package name, then moved out of `sys.modules` (its
    functions keep their own module globals), so both copies run in this process."""
    import tarfile
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="chunker-baseline-"))
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "archive",
            ref,
            "chalicelib/chunker",
            "chalicelib/domain",
            "chalicelib/__init__.py",
        ],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    ours_modules = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "chalicelib"}
    sys.path.insert(0, str(target))
    try:
        import chalicelib.chunker as baseline
    finally:
        sys.path.remove(str(target))
        for k in [k for k in sys.modules if k.split(".")[0] == "chalicelib"]:
            del sys.modules[k]
        sys.modules.update(ours_modules)
    return baseline


def baseline_factory(chunker: Any, mode: str, enc: Any) -> Factory:
    size, overlap = SETTINGS[mode]
    cfg = chunker.ChunkingConfig(chunk_size=size, chunk_overlap=overlap, strategy="recursive")

    def factory() -> Callable[[str], list[str]]:
        counter = chunker.TokenCounter.from_encoding(enc) if mode == "token" else None
        return lambda t: [c.content for c in chunker.split(t, cfg, length_function=counter)]

    return factory


def peers(mode: str, enc: Any) -> dict[str, Factory]:
    size, overlap = SETTINGS[mode]
    out: dict[str, Factory] = {}
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        if mode == "char":
            out["langchain RecursiveCharacterTextSplitter"] = lambda: (
                RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap).split_text
            )
        else:
            out["langchain RecursiveCharacterTextSplitter"] = lambda: (
                RecursiveCharacterTextSplitter.from_tiktoken_encoder(
                    encoding_name="cl100k_base", chunk_size=size, chunk_overlap=overlap
                ).split_text
            )
    except ImportError:
        pass
    try:
        import chonkie

        tok: Any = "character" if mode == "char" else enc

        def ch_rec() -> Callable[[str], list[str]]:
            c = chonkie.RecursiveChunker(tokenizer=tok, chunk_size=size)
            return lambda t: [x.text for x in c.chunk(t)]

        def ch_tok() -> Callable[[str], list[str]]:
            c = chonkie.TokenChunker(tokenizer=tok, chunk_size=size, chunk_overlap=overlap)
            return lambda t: [x.text for x in c.chunk(t)]

        out["chonkie RecursiveChunker (no overlap)"] = ch_rec
        out["chonkie TokenChunker"] = ch_tok
    except ImportError:
        pass
    try:
        import semchunk

        def sem() -> Callable[[str], list[str]]:
            c = semchunk.chunkerify(len if mode == "char" else enc, chunk_size=size)
            return lambda t: c(t, overlap=overlap)

        out["semchunk"] = sem
    except ImportError:
        pass
    return out


def floors(enc: Any) -> dict[str, Factory]:
    f: dict[str, Factory] = {"floor: str.split()": lambda: str.split}
    if enc is not None:
        f["floor: tiktoken encode_ordinary"] = lambda: enc.encode_ordinary
    return f


def measure(tools: dict[str, Factory], docs: list[tuple[str, str]], rounds: int) -> tuple[dict, dict, dict]:
    names = list(tools)
    per_doc: dict[str, list[list[float]]] = {n: [[] for _ in docs] for n in names}
    round_secs: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list[Any]] = {}
    for rnd in range(rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for n in order:
            fn = tools[n]()
            t_all = time.perf_counter()
            for i, (_, text) in enumerate(docs):
                t0 = time.perf_counter()
                out = fn(text)
                per_doc[n][i].append(time.perf_counter() - t0)
                if rnd == 0:
                    outputs.setdefault(n, []).append(out)
            round_secs[n].append(sum(x[-1] for x in per_doc[n]))
            print(
                f"  round {rnd + 1} {n:55} {(time.perf_counter() - t_all) * 1e3:9.2f} ms",
                file=sys.stderr,
                flush=True,
            )
    secs = {n: sum(statistics.median(x) for x in per_doc[n]) for n in names}
    return secs, outputs, round_secs


def run_mode(
    mode: str,
    docset: str,
    docs: list[tuple[str, str]],
    enc: Any,
    rounds: int,
    with_peers: bool,
    baseline: tuple[str, Any] | None = None,
) -> dict:
    size, overlap = SETTINGS[mode]
    mb = sum(len(t.encode()) for _, t in docs) / 1e6
    ours_tools: dict[str, Factory] = {
        "ours recursive": ours(mode, "recursive", enc),
        "ours auto (profiler+tiers+validator)": ours(mode, "auto", enc),
        "ours heading (+recursive fallback)": ours(mode, "heading", enc),
        "ours heuristic (+recursive fallback)": ours(mode, "heuristic", enc),
        "ours parent-child (4x parents, children)": ours(mode, "recursive", enc, parent_child=True),
    }
    if mode == "token":
        # A long-lived worker keeps its TokenCounter: steady state, NOT like-for-like (the rule above is a
        # fresh instance per round), so it is printed but left out of the ratios.
        ours_tools["ours recursive, warm counter (steady state)"] = ours(mode, "recursive", enc, warm=True)
    if baseline is not None:
        ours_tools[f"ours recursive @{baseline[0]} (baseline)"] = baseline_factory(baseline[1], mode, enc)
    peer_tools = peers(mode, enc) if with_peers else {}
    tools = {**floors(enc if mode == "token" else None), **ours_tools, **peer_tools}
    print(
        f"\n== {docset}, {mode} mode: {size}/{overlap} {'tokens (cl100k)' if mode == 'token' else 'runes'}, "
        f"{len(docs)} docs, {mb:.2f} MB, pure-Python chunker",
        flush=True,
    )
    secs, outputs, round_secs = measure(tools, docs, rounds)
    unit: Callable[[str], int] = len if mode == "char" else (lambda s: len(enc.encode_ordinary(s)))
    rows = {}
    for n in tools:
        row: dict[str, Any] = {
            "s": secs[n],
            "MB_per_s": mb / secs[n] if secs[n] else None,
            # spread: MB/s of the slowest and the fastest round (each round's per-document times summed)
            "MB_per_s_rounds": [mb / max(round_secs[n]), mb / min(round_secs[n])]
            if min(round_secs[n])
            else None,
        }
        if not n.startswith("floor"):
            sizes = [unit(c) for out in outputs[n] for c in out]
            row.update(
                chunks=len(sizes),
                mean=statistics.mean(sizes) if sizes else 0,
                max=max(sizes, default=0),
                over=sum(1 for x in sizes if x > size),
            )
        rows[n] = row
    fastest_peer = min((n for n in peer_tools), key=lambda n: secs[n], default=None)
    split_s = secs["floor: str.split()"]
    print(
        f"{'tool':55} {'MB/s':>7} {'rounds min-max':>15} {'x split':>8} {'chunks':>7} {'mean':>6} "
        f"{'max':>6} {'>size':>6}"
    )
    for n, r in rows.items():
        lo, hi = r["MB_per_s_rounds"] or (0.0, 0.0)
        print(
            f"{n:55} {r['MB_per_s']:7.2f} {lo:7.1f}-{hi:<7.1f} {r['s'] / split_s:8.1f} "
            f"{r.get('chunks', '-'):>7} {r.get('mean', 0):6.0f} {r.get('max', '-'):>6} {r.get('over', '-'):>6}"
        )
    if fastest_peer:
        print(f"fastest peer: {fastest_peer} ({rows[fastest_peer]['MB_per_s']:.2f} MB/s)")
    for n in ours_tools:
        if "warm" in n:
            continue
        line = f"  {n:59} {split_s / secs[n]:5.2f}x str.split"
        if fastest_peer:
            rows[n]["x_fastest_peer"] = secs[fastest_peer] / secs[n]
            ratios = ", ".join(f"{secs[p] / secs[n]:.1f}x {p.split(' ')[0]}" for p in peer_tools)
            line += f"  {secs[fastest_peer] / secs[n]:5.2f}x the fastest peer  ({ratios})"
        rows[n]["x_str_split"] = split_s / secs[n]
        print(line)
    base = next((n for n in ours_tools if n.endswith("(baseline)")), None)
    if base:
        same = outputs[base] == outputs["ours recursive"]
        rows["ours recursive"]["x_baseline"] = secs[base] / secs["ours recursive"]
        print(
            f"ours recursive vs {base}: {secs[base] / secs['ours recursive']:.2f}x "
            f"(chunks {'identical' if same else 'DIFFERENT'})"
        )
    return {
        "set": docset,
        "mode": mode,
        "size": size,
        "overlap": overlap,
        "MB": mb,
        "docs": len(docs),
        "rows": rows,
        "fastest_peer": fastest_peer,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="char,token")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--sets", default="corpus,tables")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--baseline", metavar="REF", help="also measure the chunker of this git revision")
    ap.add_argument("--render-tables", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--render-big-csv", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.render_tables:  # subprocess of render_tables(): print the rendered set as JSON
        print(json.dumps(render_tables(a.corpus)))
        return
    if a.render_big_csv:
        print(json.dumps(render_big_csv(a.corpus)))
        return
    sets = {"corpus": load_docs, "tables": render_tables, "bigcsv": render_big_csv}
    docsets = {name: sets[name](a.corpus) for name in a.sets.split(",")}
    enc = None
    modes = a.modes.split(",")
    if "token" in modes:
        try:
            enc = tiktoken_encoding()
        except ImportError:
            print("tiktoken not installed: token mode skipped", file=sys.stderr)
            modes.remove("token")
    baseline = (a.baseline, load_baseline(a.baseline)) if a.baseline else None
    results = [
        run_mode(m, name, docs, enc, a.rounds, not a.no_peers, baseline)
        for name, docs in docsets.items()
        for m in modes
    ]
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
