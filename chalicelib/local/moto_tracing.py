"""Where the moto server process's memory goes: a debugging aid, off unless asked for (issue 27).

With `WEKNORA_MOTO_TRACEMALLOC=<directory>` in its environment, the moto server process (`make run`, the
benches) starts tracemalloc, and each SIGUSR1 writes, after a garbage collection, `<directory>/moto-heap-<n>`
`.snapshot` (tracemalloc's, compared later and elsewhere: comparing in moto would stall it for minutes) and
`.census.txt` (live objects by type). Tracing slows moto several times over: for measurements only
(`bench_soak.py --moto-tracemalloc DIR` sends the signals). Two snapshots compared:

    python -c "from chalicelib.local.moto_tracing import main; main()" DIR/moto-heap-002.snapshot DIR/moto-heap-004.snapshot
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType

ENV = "WEKNORA_MOTO_TRACEMALLOC"
#: frames kept per allocation: enough to see which moto model holds it
FRAMES = 8
TOP = 40


class HeapDumps:
    """Each `dump()` writes the traced heap and a census of the live objects by type."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._count = 0

    def dump(self) -> Path:
        gc.collect()
        self._count += 1
        stem = self.directory / f"moto-heap-{self._count:03d}"
        census = Counter(type(thing).__qualname__ for thing in gc.get_objects())
        lines = [f"{count:10d} {name}" for name, count in census.most_common(80)]
        tracemalloc.take_snapshot().dump(str(stem) + ".snapshot.part")
        os.replace(str(stem) + ".snapshot.part", str(stem) + ".snapshot")  # whole, or not there
        Path(str(stem) + ".census.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return stem


def start_if_asked() -> HeapDumps | None:
    """In the moto server process, before it serves: tracing and the SIGUSR1 handler when `ENV` is set."""
    directory = os.environ.get(ENV)
    if not directory:
        return None
    tracemalloc.start(FRAMES)
    dumps = HeapDumps(Path(directory))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        dumps.dump()

    signal.signal(signal.SIGUSR1, on_signal)
    return dumps


def compared(before: Path, after: Path, key: str = "traceback", top: int = TOP) -> str:
    """What the heap gained from `before` to `after`, largest first."""
    ignored = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
    old = tracemalloc.Snapshot.load(str(before)).filter_traces(ignored)
    new = tracemalloc.Snapshot.load(str(after)).filter_traces(ignored)
    diffs = new.compare_to(old, key)
    size = sum(s.size for s in new.statistics("filename"))
    lines = [f"traced heap {size / 1e6:.2f} MB; by {key}: {sum(d.size_diff for d in diffs) / 1e6:+.2f} MB"]
    for diff in diffs[:top]:
        lines.append(f"{diff.size_diff / 1e3:+10.1f} KB {diff.count_diff:+8d} blocks")
        lines.extend(f"      {line}" for line in diff.traceback.format())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="what moto's heap gained between two snapshots")
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--key", default="traceback", choices=["traceback", "lineno", "filename"])
    parser.add_argument("--top", type=int, default=TOP)
    arguments = parser.parse_args()
    print(compared(arguments.before, arguments.after, arguments.key, arguments.top))


if __name__ == "__main__":
    main()
