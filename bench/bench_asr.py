#!/usr/bin/env python3
"""ASR word error rate per clip: the corpus's speech recordings with a `<clip>.truth.txt`.

    .venv/bin/python bench/bench_asr.py [--corpus DIR] [--modes vad,novad] [--silence 20] [--json OUT.json]

Engine: faster-whisper, Whisper-base (multilingual) int8 on one thread, the spoken language detected
(no language forced), as the docreader runs it. Modes: `vad` (the default engine: Silero voice-activity
detection drops silence before decoding) and `novad` (the engine before issue 13). Besides each clip,
`--silence N` adds a derived clip per WAV: N seconds of digital silence before, in the middle of and
after the speech (what "long silences" do to decoding); 0 leaves them out.

WER = word-level Levenshtein distance / truth words, on lower-cased words ([a-z0-9'] runs; for Chinese,
Japanese and Korean clips the text's characters without spaces would be needed: there are none here).
Goal: <= 10% on clean speech.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "parsers"))
from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

DEFAULT_CORPUS = default_corpus(ROOT)

from parser_helpers import with_silence  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

from chalicelib.parsers.asr import WhisperAsr  # noqa: E402


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def wer(hypothesis: str, truth: str) -> float:
    t = words(truth)
    return Levenshtein.distance(words(hypothesis), t) / max(len(t), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--modes", default="vad,novad")
    ap.add_argument("--silence", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    clips: list[tuple[str, bytes, str]] = []
    for truth in sorted(a.corpus.glob("speech-*.truth.txt")):
        name = truth.name[: -len(".truth.txt")]
        data = (a.corpus / name).read_bytes()
        text = truth.read_text(encoding="utf-8")
        clips.append((name, data, text))
        if a.silence and name.endswith(".wav"):
            clips.append((f"{name} +{a.silence:g}s silences", with_silence(data, a.silence), text))
    rows: list[dict[str, Any]] = []
    base = WhisperAsr()
    if not base.available():
        sys.exit("faster-whisper and the Whisper weight wheels are not installed (make install-dev)")
    for mode in a.modes.split(","):
        engine = WhisperAsr(vad_filter=mode == "vad")
        print(f"\n== {mode}: faster-whisper base int8, 1 thread, language detected")
        for name, data, truth in clips:
            t0 = time.perf_counter()
            text = engine.transcribe(data, name.split(" ")[0])
            dt = time.perf_counter() - t0
            value = wer(text, truth)
            rows.append({"mode": mode, "clip": name, "wer": value, "s": dt, "language": engine.last_language})
            print(f"  {name:44} WER {value * 100:5.1f}%  {dt:5.1f}s  lang={engine.last_language}")
        mine = [r["wer"] for r in rows if r["mode"] == mode]
        print(
            f"  -- {mode}: mean WER {statistics.mean(mine) * 100:.1f}%, worst {max(mine) * 100:.1f}% (goal <= 10%)"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
