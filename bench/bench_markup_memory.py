"""Active-content cleaning of big Markdown (`domain/markup.strip_active_content`, run by the docreader stage
on every parsed document, and on manual text and chunk edits): time and memory on texts of one shape each
with one suspect tag, so the cleaning parses them. `--mode rss` runs each case and size in a process of its
own and prints its max RSS (and the RSS once the text is built: what the cleaning adds is the difference);
`--mode trace` prints tracemalloc's peak (slower).

    .venv/bin/python bench/bench_markup_memory.py [--mode rss|trace] [--sizes 5,20] [--cases one-list,...]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.domain.markup import strip_active_content

SCRIPT = "<script>alert(1)</script>\n"


def _repeated(line: Callable[[int], str], runes: int) -> str:
    parts: list[str] = []
    size = 0
    while size < runes:
        parts.append(line(len(parts)))
        size += len(parts[-1])
    return "".join(parts)


CASES: dict[str, Callable[[int], str]] = {
    "paragraphs": lambda n: (
        _repeated(lambda k: f"Paragraph {k} with *some* words and a [link](https://x.example/{k}).\n\n", n)
        + SCRIPT
    ),
    "inline-tags": lambda n: (
        _repeated(
            lambda k: f'Text <b>bold {k}</b> and <span class="c">span</span> <img src="a{k}.png">.\n\n', n
        )
        + SCRIPT
    ),
    "onclick-every-1000": lambda n: _repeated(
        lambda k: f"Text <b>bold {k}</b> <span{' onclick=x' if k % 1000 == 0 else ''}>s</span>.\n\n", n
    ),
    "one-list": lambda n: _repeated(lambda k: f"- item <b>{k}</b>\n", n) + "\n" + SCRIPT,
    "one-quote": lambda n: _repeated(lambda k: f"> quoted line {k}\n", n) + "\n" + SCRIPT,
    "one-html-block": lambda n: (
        "<div>\n" + _repeated(lambda k: f"html line {k}\n", n) + "</div>\n\n" + SCRIPT
    ),
}


def _one(case: str, megabytes: float, mode: str) -> None:
    text = CASES[case](int(megabytes * 1e6))
    built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    if mode == "trace":
        tracemalloc.start()
    started = time.perf_counter()
    strip_active_content(text)
    seconds = time.perf_counter() - started
    if mode == "trace":
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        print(f"{case:20s} {megabytes:5.1f} MB: peak {peak:8.1f} MB traced, {seconds:6.1f} s (traced)")
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        print(
            f"{case:20s} {megabytes:5.1f} MB: max RSS {rss:8.1f} MB (text built {built:.0f}), {seconds:6.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["rss", "trace"], default="rss")
    parser.add_argument("--sizes", default="5,20", help="megabytes of text, comma-separated")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--one", nargs=2, metavar=("CASE", "MB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one[0], float(args.one[1]), args.mode)
        return
    for case in args.cases.split(","):
        for size in args.sizes.split(","):
            # a process each: max RSS is a high-water mark
            subprocess.run([sys.executable, __file__, "--mode", args.mode, "--one", case, size], check=True)


if __name__ == "__main__":
    main()
