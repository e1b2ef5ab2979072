"""A hit's text that names an internal URL (`s3://bucket/key`) gets a signed link only when the URL is one of that
hit's document's own stored files: a tenant who writes another tenant's object URL into its own document gets no
link to it (it had been signed, whatever object it named)."""

from __future__ import annotations

import requests
from e2e.conftest import Api

from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.local.runtime import LocalRuntime

SECRET = "bravo-confidential-payroll-figures"


def test_a_url_written_into_a_document_does_not_sign_another_tenants_file(
    api: Api, other_api: Api, services: Services, runtime: LocalRuntime
) -> None:
    victim_kb = other_api.create_kb()
    made = other_api.upload(victim_kb["id"], "payroll.md", f"# Payroll\n\n{SECRET}\n".encode())
    assert made.status_code == 200, made.json_body
    victim = made.json_body["data"]
    runtime.drain(timeout=120)
    assert other_api.knowledge(victim["id"])["parse_status"] == "completed"
    target = services.files.url_for(parsed_markdown_key(victim["tenant_id"], victim["id"], 1))
    assert services.files.exists(target)

    kb = api.create_kb()
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": "notes", "content": f"# Harmless\n\nzebra crossing notes see {target} for more\n"},
    )
    assert manual.status_code == 200, manual.json_body
    runtime.drain(timeout=120)
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "zebra crossing"})
    assert hits.status_code == 200, hits.json_body
    text = " ".join(hit["content"] for hit in hits.json_body["data"])
    assert "zebra" in text
    links = [word for word in text.split() if word.startswith("http")]
    for link in links:
        got = requests.get(link, timeout=30)
        assert SECRET not in got.text, f"tenant A read tenant B's parsed file through {link}"
    assert victim["id"] not in text
