"""The optional-tool markers (tests/optional_tools.py), run in a pytester sandbox that loads the same plugin:
a missing tool skips with the reason, WEKNORA_REQUIRE_SYSTEM_DEPS=1 (set by .ci/run) turns that skip into
a failure, and a present tool lets the test run. Tools are made missing or present through PATH."""

from __future__ import annotations

import re

import pytest
from optional_tools import OPTIONAL_TOOLS, REQUIRE_ENV, TESSERACT_LANGUAGES
from project_paths import ROOT

from chalicelib.domain.languages import OCR_LANGUAGES

#: the tools a PATH can hide or provide: marker → the executable the plugin looks for
BINARIES = {"requires_tesseract": "tesseract", "requires_libreoffice": "soffice"}
LIST_LANGS = "".join(f"echo {lang}\n" for lang in TESSERACT_LANGUAGES)


@pytest.fixture
def sandbox(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """One test per binary tool and one that needs nothing; PATH holds only `bin/`, empty for now."""
    pytester.makeconftest('pytest_plugins = ("optional_tools",)')
    markers = "".join(f"\n    {marker}: under test" for marker in BINARIES)
    pytester.makeini(f"[pytest]\nmarkers ={markers}\n")
    tests = "".join(f"@pytest.mark.{m}\ndef test_{m}():\n    pass\n\n" for m in BINARIES)
    pytester.makepyfile(f"import pytest\n\n{tests}def test_needs_nothing():\n    pass\n")
    (pytester.path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(pytester.path / "bin"))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the sandbox needs no other plugin
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    return pytester


def test_a_missing_tool_skips_with_the_reason(sandbox: pytest.Pytester) -> None:
    result = sandbox.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=len(BINARIES))
    result.stdout.fnmatch_lines_random(
        [
            f"SKIPPED*{OPTIONAL_TOOLS[m].name} is not installed; `make system-deps` installs it"
            for m in BINARIES
        ]
    )


def test_a_missing_tool_fails_when_system_deps_are_required(
    sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    result = sandbox.runpytest()
    result.assert_outcomes(passed=1, errors=len(BINARIES))
    assert result.ret != 0
    result.stdout.fnmatch_lines_random(
        [
            f"*{OPTIONAL_TOOLS[m].name} is not installed, but {REQUIRE_ENV}=1: this test must run here, not skip"
            for m in BINARIES
        ]
    )


def test_present_tools_let_the_tests_run(sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for binary in BINARIES.values():
        tool = sandbox.path / "bin" / binary
        tool.write_text(f"#!/bin/sh\necho 'List of available languages (6):'\n{LIST_LANGS}exit 0\n")
        tool.chmod(0o755)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    sandbox.runpytest().assert_outcomes(passed=len(BINARIES) + 1)


def test_every_tool_marker_is_registered_and_every_requires_marker_has_a_tool(
    pytestconfig: pytest.Config,
) -> None:
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert {m for m in registered if m.startswith("requires_")} == set(OPTIONAL_TOOLS)


def test_ci_requires_the_system_deps_it_installs_and_runs_the_readme_command() -> None:
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert "set -euo pipefail" in commands
    assert f"export {REQUIRE_ENV}=1" in commands
    assert "make system-deps" in commands  # as a command of its own: `set -e` stops CI when it fails
    assert not any(re.search(r"\|\||; *true", c) for c in commands)
    # exactly the README's test command, after the two above; only other marked suites may follow it
    assert "make test" in commands
    assert commands.index(f"export {REQUIRE_ENV}=1") < commands.index("make test")
    assert commands.index("make system-deps") < commands.index("make test")
    assert all(c.startswith("make test-") for c in commands[commands.index("make test") + 1 :])


def test_a_tesseract_without_the_cjk_language_data_counts_as_missing(
    sandbox: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = sandbox.path / "bin" / "tesseract"
    tool.write_text("#!/bin/sh\necho 'List of available languages (2):'\necho eng\necho kor\n")
    tool.chmod(0o755)
    monkeypatch.setenv(REQUIRE_ENV, "1")
    result = sandbox.runpytest()
    result.assert_outcomes(passed=1, errors=2)  # tesseract without jpn…, and no soffice at all
    result.stdout.fnmatch_lines(["*tesseract*jpn*is not installed, but*"])


def test_the_package_list_installs_the_language_data_the_setting_and_the_tests_use() -> None:
    listed = ROOT / "scripts" / "local-system-packages.txt"
    packages = {line.split("#", 1)[0].strip() for line in listed.read_text().splitlines()}
    data = {
        p.removeprefix("tesseract-ocr-").replace("-", "_") for p in packages if p.startswith("tesseract-ocr-")
    }
    assert data == set(TESSERACT_LANGUAGES)
    assert set(OCR_LANGUAGES) <= data  # every allowed `ocr_languages` value is installed
