"""Run a command as on a fresh machine: the optional system tools hidden from PATH.

    python scripts/without_system_tools.py CMD [ARG ...]      (`make test-without-tools`)

The command gets a PATH of one temporary directory holding a link to every executable on the current PATH
except the optional tools: every binary the Debian packages of the docreader lists install
(functions/docreader/system-packages.txt, scripts/local-system-packages.txt: LibreOffice, tesseract,
poppler), and ffmpeg/ffprobe. WEKNORA_REQUIRE_SYSTEM_DEPS is unset, so the tests that need a tool skip
with their reason, as `make test` does on a machine without `make system-deps`. The code finds every tool
through PATH (`shutil.which`), so hiding it there hides it from the code too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_LISTS = (
    ROOT / "functions" / "docreader" / "system-packages.txt",
    ROOT / "scripts" / "local-system-packages.txt",
)
#: hidden whether or not a package list names them: what the code and the tests call by name
ALWAYS_HIDDEN = {
    "tesseract",
    "soffice",
    "libreoffice",
    "pdftotext",
    "pdftoppm",
    "pdfinfo",
    "ffmpeg",
    "ffprobe",
    "chromium",
    "chromedriver",
}
BIN_DIRS = ("/usr/bin/", "/bin/", "/usr/local/bin/", "/usr/sbin/", "/sbin/")


def packages() -> list[str]:
    names = []
    for listed in PACKAGE_LISTS:
        for line in listed.read_text().splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name)
    return names


def package_binaries(names: list[str]) -> set[str]:
    """The executables the installed packages put on the system path (none for a package not installed)."""
    if shutil.which("dpkg") is None:
        return set()
    found = set()
    for name in names:
        listed = subprocess.run(["dpkg", "-L", name], capture_output=True, text=True, check=False)
        found |= {Path(p).name for p in listed.stdout.splitlines() if p.startswith(BIN_DIRS)}
    return found


def hidden_tools() -> set[str]:
    return ALWAYS_HIDDEN | package_binaries(packages())


def path_without(hidden: set[str], into: Path) -> str:
    """A directory of links to what PATH offers, minus `hidden` (the first of each name wins, as in PATH)."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not Path(directory).is_dir():
            continue
        for entry in Path(directory).iterdir():
            target = into / entry.name
            if entry.name in hidden or target.exists() or target.is_symlink():
                continue
            if entry.is_file() and os.access(entry, os.X_OK):
                target.symlink_to(entry)
    return str(into)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    hidden = hidden_tools()
    with tempfile.TemporaryDirectory(prefix="weknora-fresh-path-") as tmp:
        env = dict(os.environ, PATH=path_without(hidden, Path(tmp)))
        env.pop("WEKNORA_REQUIRE_SYSTEM_DEPS", None)
        print(f"hidden from PATH: {', '.join(sorted(hidden))}", file=sys.stderr)
        return subprocess.run(argv, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
