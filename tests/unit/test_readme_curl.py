"""Every `curl` in the README names a route the app has, with a method that route takes (the walkthrough's
deliberate wrong route aside), so the docs cannot drift from the API. `tests/local/test_readme_quickstart.py`
runs the quickstart itself."""

from __future__ import annotations

import re

from project_paths import ROOT

#: the walkthrough's example of an error answer
DELIBERATELY_UNKNOWN = {"/no-such-route"}


def readme_calls() -> list[tuple[str, str]]:
    """(method, path under /api/v1) of each curl command; shell variables stand for ids."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^curl .*?(?<!\\)$", re.sub(r"\\\n\s*", " ", text), flags=re.MULTILINE)
    calls = []
    for command in commands:
        found = re.search(r'"\$API(/[^"?]*)', command)
        if not found:
            continue
        explicit = re.search(r"-X (\w+)", command)
        method = explicit[1] if explicit else ("POST" if re.search(r" -[dF] ", command) else "GET")
        calls.append((method, re.sub(r"\$\w+", "{id}", found[1])))
    return calls


def test_every_curl_in_the_readme_names_a_route_of_the_app() -> None:
    from app import app

    routes = [
        (re.compile("^" + re.sub(r"\{\w+\}", "[^/]+", path.removeprefix("/api/v1")) + "$"), set(methods))
        for path, methods in app.routes.items()
    ]
    calls = readme_calls()
    assert len(calls) >= 15, calls  # the walkthrough, search, the first tenant
    for method, path in calls:
        if path in DELIBERATELY_UNKNOWN:
            continue
        concrete = path.replace("{id}", "x")
        matching = [methods for pattern, methods in routes if pattern.match(concrete)]
        assert matching, f"README: no route for {method} {path}"
        assert any(method in methods for methods in matching), f"README: {path} does not take {method}"
