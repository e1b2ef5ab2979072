"""Progress inside a stage, as a person wants to see it: done of total, percent, rate and time left.

Derived from what the stage already writes in its span (heartbeat outputs and timestamps), so every reader
of the stage tree (the spans API, the CLI's live table) shows the same figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

#: a stage span's counters that concurrent workers add to atomically (the embedding fan-out's slices),
#: kept beside the span's outputs and read as part of them: a span update stays O(1) in the work's size
SPAN_COUNTERS = ("entries_indexed", "texts_embedded", "cache_hits", "batches", "slices_done")


def require_span_counters(names: Iterable[str]) -> None:
    """A span's counters are only SPAN_COUNTERS (each has its own attribute in the spans table)."""
    unknown = set(names) - set(SPAN_COUNTERS)
    if unknown:
        raise ValueError(f"not span counters: {sorted(unknown)}")


#: the multimodal stage's per-image sub-spans (`multimodal.image[i]`, stages.messages.ImageTaskModel): its
#: `images_done` is how many of them are closed, so a redelivered image, which rewrites its own, counts once
IMAGE_SPAN_PREFIX = "multimodal.image["

Measure = tuple[str, str, str]
#: per stage: (output holding the work done, output holding the total, unit shown); the first one whose
#: total the stage reports counts (the docreader reads pages, or transcribes seconds of audio)
MEASURES: dict[str, tuple[Measure, ...]] = {
    "docreader": (
        ("pages_parsed", "pages_total", "pages"),
        ("audio_seconds_done", "audio_seconds_total", "seconds of audio"),
    ),
    "chunking": (("chunks_written", "chunks_total", "chunks"),),
    "embedding": (("entries_indexed", "texts_total", "chunks"),),
    "multimodal": (("images_done", "images_total", "images"),),
    "postprocess": (("subtasks_done", "subtasks_total", "subtasks"),),
}


def stage_progress(
    stage: str,
    outputs: Mapping[str, Any],
    started_at: datetime | None,
    updated_at: datetime | None,
    finished: bool,
) -> dict[str, Any] | None:
    """None when the stage reports no measurable total."""
    reported = [m for m in MEASURES.get(stage, ()) if (_number(outputs.get(m[1])) or 0) > 0]
    if not reported:
        return None
    done_key, total_key, unit = reported[0]
    total = _number(outputs.get(total_key)) or 0.0
    done = _number(outputs.get(done_key))
    done = total if finished and done is None else min(done or 0, total)
    progress: dict[str, Any] = {
        "unit": unit,
        "done": int(done),
        "total": int(total),
        "percent": round(100 * done / total, 1),
        "rate_per_second": None,
        "eta_seconds": None,
    }
    if started_at is not None and updated_at is not None and done > 0:
        elapsed = (updated_at - started_at).total_seconds()
        if elapsed > 0:
            rate = done / elapsed
            progress["rate_per_second"] = round(rate, 2)
            progress["eta_seconds"] = 0 if finished else round((total - done) / rate, 1)
    return progress


def bar(progress: Mapping[str, Any], width: int = 20) -> str:
    """`[#######.............] 720/3152 chunks 23.9/s ETA 1m42s` (plain text, for the CLI)."""
    filled = int(width * float(progress["percent"]) / 100)
    text = (
        f"[{'#' * filled}{'.' * (width - filled)}] {progress['done']}/{progress['total']} {progress['unit']}"
    )
    if progress.get("rate_per_second"):
        text += f" {progress['rate_per_second']}/s"
    eta = progress.get("eta_seconds")
    if eta:
        minutes, seconds = divmod(int(eta), 60)
        text += f" ETA {minutes}m{seconds:02d}s" if minutes else f" ETA {seconds}s"
    return text


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
