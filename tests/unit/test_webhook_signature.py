"""The README's verification snippet accepts what a delivery signs, and refuses a changed body, another
secret and an old timestamp."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from project_paths import ROOT

from chalicelib.domain.webhooks import signature_header, verify


def readme_verifier() -> Callable[..., bool]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Events and webhooks\n") + 1 :]
    section = section[: section.index("\n### ")]  # up to the next section
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    scope: dict[str, Any] = {}
    exec(snippet, scope)
    verified: Callable[..., bool] = scope["verified"]
    return verified


def test_the_readme_snippet_verifies_a_delivery() -> None:
    verified = readme_verifier()
    body = b'{"type":"Knowledge Completed"}'
    now = int(time.time())
    header = signature_header("whsec_s", now, body)
    assert verified("whsec_s", header, body) and verify("whsec_s", header, body, now=now)
    assert not verified("whsec_s", header, body + b" ")
    assert not verified("whsec_other", header, body)
    old = signature_header("whsec_s", now - 3600, body)
    assert not verified("whsec_s", old, body) and not verify("whsec_s", old, body, now=now)


def test_the_readme_snippet_refuses_a_header_whose_time_is_not_a_number() -> None:
    verified = readme_verifier()
    assert not verified("whsec_s", "t=soon,v1=00", b"{}")
    assert not verified("whsec_s", "v1=00", b"{}")
