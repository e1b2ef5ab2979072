"""The console in a real browser: headless Chromium (Debian chromium + chromium-driver, driven by selenium)
against the local HTTP server `make run` serves, on the e2e runtime (moto, the real pollers, drained here).

Sign in through the `#key=` fragment (the key leaves the address bar), see the knowledge bases, upload a file
through the file input, watch its row reach `completed` while the queues drain, open it (its stage timeline
and chunks), search it, and delete it; every console response carries the strict CSP."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from chalicelib.local.runtime import LocalRuntime

from .conftest import API_KEY, Api

pytestmark = pytest.mark.requires_chromium

WORD = "zebrafishmigration"
TEXT = f"# Rivers\n\nThe {WORD} of the northern rivers starts in spring.\n\nSalmon wait below the weirs.\n"


@pytest.fixture
def served(runtime: LocalRuntime, api: Api) -> Iterator[str]:
    base = runtime.serve_http("127.0.0.1", 0, access_log=False)
    try:
        yield base
    finally:
        runtime.stop_http()


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: Any, check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if found := check():
                return found
        except Exception:  # the page re-renders under us: look again
            pass
        time.sleep(0.2)
    logs = "\n".join(str(entry) for entry in driver.get_log("browser"))
    raise AssertionError(f"never saw {what}\npage: {driver.find_element('tag name', 'main').text}\n{logs}")


def test_the_console_walks_a_document_from_upload_to_delete(
    served: str, runtime: LocalRuntime, api: Api, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    page = requests.get(f"{served}/console/", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    kb = api.create_kb("rivers")

    # signed in by the fragment: the key moves to session storage and out of the address bar
    browser.get(f"{served}/console/#key={API_KEY}")
    wait(browser, lambda: browser.find_element(By.LINK_TEXT, "rivers"), "the knowledge base listed")
    assert "key=" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('weknora.key')") == API_KEY
    wait(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, f"tr[data-kb-id='{kb['id']}'] td.num").text == "0",
        "the knowledge base's stats",
    )

    # a shared link opens on the knowledge base; the file input uploads
    browser.get(f"{served}/console/#kb={kb['id']}")
    picker = wait(browser, lambda: browser.find_element(By.ID, "file-input"), "the upload zone")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rivers.md"
        path.write_text(TEXT, encoding="utf-8")
        picker.send_keys(str(path))
        row = "#documents tr[data-knowledge-id]"
        wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, row), "the uploaded document's row")
    knowledge_id = browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-knowledge-id")
    runtime.drain(timeout=60)
    wait(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, row).get_attribute("data-state") == "completed",
        "the row turn completed (live)",
    )

    # the document: its stages, its chunks, its parsed Markdown
    browser.find_element(By.LINK_TEXT, "rivers.md").click()
    wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#timeline [data-span]"), "the timeline")
    spans = {
        e.get_attribute("data-span"): e.get_attribute("data-status")
        for e in browser.find_elements(By.CSS_SELECTOR, "#timeline [data-span]")
    }
    assert {"docreader", "chunking", "embedding"} <= set(spans), spans
    assert spans["docreader"] == spans["chunking"] == spans["embedding"] == "done", spans
    chunk = wait(browser, lambda: browser.find_element(By.CSS_SELECTOR, "#chunks .chunk"), "a chunk")
    assert WORD in chunk.text
    wait(browser, lambda: WORD in browser.find_element(By.ID, "markdown").text, "the parsed Markdown")

    # search: the hit, its match type and its highlighted term
    browser.get(f"{served}/console/#kb={kb['id']}&tab=search")
    wait(browser, lambda: browser.find_element(By.ID, "search-query"), "the search box").send_keys(WORD)
    browser.find_element(By.ID, "search-run").click()
    hit = wait(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, f"#hits .hit[data-knowledge-id='{knowledge_id}']"),
        "the hit",
    )
    assert hit.find_element(By.CSS_SELECTOR, "mark").text.lower() == WORD
    assert hit.find_element(By.CSS_SELECTOR, ".badge").text in ("hybrid", "keyword", "vector")

    # delete it from its page: the list drops it once the delete task has run
    browser.get(f"{served}/console/#knowledge={knowledge_id}")
    wait(browser, lambda: browser.find_element(By.ID, "delete-knowledge"), "the delete button").click()
    browser.switch_to.alert.accept()
    wait(browser, lambda: f"kb={kb['id']}" in browser.current_url, "the way back to the knowledge base")
    runtime.drain(timeout=60)
    assert api.get(f"/knowledge/{knowledge_id}").status_code == 404
    wait(
        browser,
        lambda: (
            not browser.find_elements(By.CSS_SELECTOR, f"tr[data-knowledge-id='{knowledge_id}']")
            and browser.find_elements(By.CSS_SELECTOR, "#documents tr")
        ),
        "the deleted row gone",
    )
