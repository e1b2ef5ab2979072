"""The console in headless Chromium, on what it must keep following: a document on a named storage backend
shows its parsed Markdown (the page's CSP lets it read the backend's links), rows loaded by "More" stay while
the list refreshes live, a presigned upload the API rejects on arrival says why, and the operators' page
counts each dead-letter queue on its own (saying when a queue's listing is cut); a page the API answered late
never replaces the page routed to since."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from chalicelib.bootstrap import Services
from chalicelib.local.moto_server import MotoServer
from chalicelib.local.runtime import LocalRuntime

from .conftest import API_KEY, Api
from .test_console_browser import browser, served, use_link_key, wait  # noqa: F401
from .test_storage_backends_api import TEXT, backends, lab_endpoint  # noqa: F401

pytestmark = pytest.mark.requires_chromium

OPERATOR_KEY = "console-operator-key"
ROWS = "return document.querySelectorAll('#documents tr[data-knowledge-id]').length"


def test_the_parsed_markdown_of_a_document_on_a_named_backend_is_shown(
    served: str,  # noqa: F811
    runtime: LocalRuntime,
    api: Api,
    backends: Services,  # noqa: F811
    lab_endpoint: MotoServer,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    kb = api.create_kb(storage_backend="lab")
    created = api.upload(kb["id"], "tides.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    policy = requests.get(f"{served}/console/", timeout=10).headers["Content-Security-Policy"]
    assert lab_endpoint.url.rstrip("/") in policy  # the backend's own endpoint, beside the stack's

    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    browser.get(f"{served}/console/#knowledge={created['id']}")
    shown = wait(
        browser,
        lambda: (t := browser.find_element(By.ID, "markdown").text) != "…" and t,
        "the Markdown panel settled",
        timeout=30,
    )
    assert "Spring tides follow the new and the full moon" in shown, shown


def test_rows_loaded_by_more_stay_shown_while_the_list_refreshes(
    served: str,  # noqa: F811
    runtime: LocalRuntime,
    api: Api,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    kb = api.create_kb("many")
    for i in range(130):  # left pending (the queues are not drained): the list refreshes every 2 s
        sent = api.upload(kb["id"], f"doc-{i:03}.txt", f"document number {i} unique {i * 7919}".encode())
        assert sent.status_code in (200, 201), sent.json_body
    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, f"tr[data-kb-id='{kb['id']}']"), "the list")
    browser.get(f"{served}/console/#kb={kb['id']}")
    wait(browser, lambda: browser.execute_script(ROWS) == 50, "the first page")
    for shown in (100, 130):
        more = wait(
            browser,
            lambda: (b := browser.find_element(By.XPATH, "//button[text()='More']")).is_displayed() and b,
            "More",
        )
        more.click()
        wait(browser, lambda: browser.execute_script(ROWS) == shown, f"{shown} rows")  # noqa: B023
    names = "return [...document.querySelectorAll('#documents tr[data-knowledge-id] td:nth-child(2)')].map((c) => c.textContent)"
    time.sleep(5)  # two live refreshes at least
    assert "updating live" in browser.find_element(By.ID, "list-status").text
    assert browser.execute_script(ROWS) == 130
    assert sorted(browser.execute_script(names)) == [f"doc-{i:03}.txt" for i in range(130)]
    assert not browser.find_element(By.XPATH, "//button[text()='More']").is_displayed()


#: over the console's 4,000,000-byte direct limit: the upload takes the presigned PUT
BIG = b"%PDF-1.4\n" + b"0" * 4_100_000


def test_a_presigned_upload_rejected_on_arrival_says_why(
    served: str,  # noqa: F811
    runtime: LocalRuntime,
    api: Api,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    kb = api.create_kb("big files")
    first = api.upload(kb["id"], "first.pdf", BIG)
    assert first.status_code == 200, first.json_body
    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    browser.get(f"{served}/console/#kb={kb['id']}")
    picker = wait(browser, lambda: browser.find_element(By.ID, "file-input"), "the upload zone")
    state = "#uploads .row span:last-child"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "copy.pdf"
        path.write_bytes(BIG)
        picker.send_keys(str(path))
        wait(browser, lambda: "presigned" in browser.find_element(By.CSS_SELECTOR, state).text, "the PUT", 60)
    runtime.drain(timeout=120)  # the arrival: refused, a duplicate of first.pdf's bytes
    listed = api.get(f"/knowledge-bases/{kb['id']}/knowledge").json_body["data"]["items"]
    assert [r["file_name"] for r in listed] == ["first.pdf"]
    shown = wait(
        browser,
        lambda: (t := browser.find_element(By.CSS_SELECTOR, state).text) and "sent" not in t and t,
        "the rejection",
    )
    assert shown == "already there"
    assert browser.find_elements(By.CSS_SELECTOR, "#uploads .row .error")


def test_dead_letters_are_counted_per_queue_and_a_cut_listing_says_so(
    served: str,  # noqa: F811
    api: Api,
    services: Services,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    sqs = boto3.client("sqs")
    sent = {"docreader": 105, "embedding": 3}
    urls = {q: sqs.get_queue_url(QueueName=f"weknora-{q}-dlq")["QueueUrl"] for q in sent}
    for queue, n in sent.items():
        for i in range(0, n, 10):
            entries = [
                {
                    "Id": str(j),
                    "MessageBody": json.dumps(
                        {"knowledge_id": f"00000000-0000-4000-8000-{j:012d}", "attempt": 1}
                    ),
                }
                for j in range(i, min(n, i + 10))
            ]
            sqs.send_message_batch(QueueUrl=urls[queue], Entries=entries)
    try:
        browser.get(f"{served}/console/#view=admin&operator_key={OPERATOR_KEY}")
        use_link_key(browser)
        wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#dlq"), "the dead-letter queues", 90)
        counts = "#dlq > .toolbar > span"
        assert [s.text for s in browser.find_elements(By.CSS_SELECTOR, counts)] == [
            "docreader: 105",
            "embedding: 3",
        ]
        buttons = [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#dlq > .toolbar > button")]
        assert buttons == ["Redrive docreader", "Redrive embedding", "Redrive all"]
        assert "first 100" in browser.find_element(By.ID, "dlq-cut").text

        # the API says where its listing (100 letters in all) stopped
        page = api.client.http.get("/api/v1/admin/dlq", headers={"X-Operator-Key": OPERATOR_KEY})
        summary = {q["queue"]: q for q in json.loads(page.body)["queues"]}
        assert summary["docreader"] == {"queue": "docreader", "listed": 100, "complete": False}
        assert summary["embedding"] == {"queue": "embedding", "listed": 0, "complete": False}
    finally:
        for url in urls.values():
            sqs.purge_queue(QueueUrl=url)


#: the knowledge bases' listing answered 3 s late (the page's own fetch, wrapped)
SLOW_LIST = """
const real = window.fetch;
window.fetch = (url, init) => String(url).split("?")[0].endsWith("/knowledge-bases")
  ? new Promise((ok) => setTimeout(ok, 3000)).then(() => real(url, init)) : real(url, init);
"""


def test_a_page_answered_late_never_replaces_the_page_routed_to_since(
    served: str,  # noqa: F811
    api: Api,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    kb = api.create_kb("estuaries")
    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, f"tr[data-kb-id='{kb['id']}']"), "the list")
    browser.execute_script(SLOW_LIST)
    browser.execute_script("location.hash = 'list=again'")  # the knowledge bases again: their listing is slow
    time.sleep(0.5)
    browser.execute_script(f"location.hash = 'kb={kb['id']}'")  # the person goes on to a knowledge base
    wait(
        browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#tab-documents"), "the knowledge base's page"
    )
    time.sleep(4)  # the late listings answered
    assert browser.find_element(By.CSS_SELECTOR, "main h1").text == "estuaries"
    assert browser.find_elements(By.CSS_SELECTOR, "#tab-documents")
