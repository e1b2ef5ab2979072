"""Corpus access for the parser tests (read-only files; a missing file skips the test)."""

import io
import wave
from pathlib import Path

from project_paths import corpus_bytes

__all__ = ["DATA", "corpus_bytes"]

DATA = Path(__file__).parent / "data"


def with_silence(wav: bytes, seconds: float) -> bytes:
    """The clip with `seconds` of silence before it, in its middle and after it."""
    with wave.open(io.BytesIO(wav)) as src:
        params = src.getparams()
        frames = src.readframes(src.getnframes())
    frame = params.sampwidth * params.nchannels
    half = (len(frames) // frame // 2) * frame
    gap = b"\x00" * (int(params.framerate * seconds) * frame)
    out = io.BytesIO()
    with wave.open(out, "wb") as dst:
        dst.setparams(params)
        dst.writeframes(gap + frames[:half] + gap + frames[half:] + gap)
    return out.getvalue()
