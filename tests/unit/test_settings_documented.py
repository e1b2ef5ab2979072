"""Every environment variable the settings read is documented: in the README (what users set) or in
ARCHITECTURE.md (the internals' table), so no setting exists only in the code."""

from __future__ import annotations

import re

from project_paths import ROOT


def test_every_setting_is_documented() -> None:
    code = (ROOT / "chalicelib" / "settings.py").read_text(encoding="utf-8")
    names = set(re.findall(r'"(WEKNORA_[A-Z0-9_]*[A-Z0-9])"', code))
    docs = (ROOT / "README.md").read_text(encoding="utf-8") + (ROOT / "ARCHITECTURE.md").read_text(
        encoding="utf-8"
    )
    assert len(names) > 40
    assert not {name for name in names if name not in docs}, "document these in README.md or ARCHITECTURE.md"
