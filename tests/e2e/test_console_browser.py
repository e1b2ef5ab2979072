"""The console in a real browser: headless Chromium (Debian chromium + chromium-driver, driven by selenium)
against the local HTTP server `make run` serves, on the e2e runtime (moto, the real pollers, drained here).

Sign in through the `#key=` fragment (the key leaves the address bar), see the knowledge bases, upload a file
through the file input, one dropped on the zone and one on the presigned path, watch the rows reach
`completed` while the queues drain, open it (its stage timeline
and chunks), search it, delete it, and open the operators' page; every console response carries the strict
CSP."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import requests

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import API_KEY, Api

pytestmark = pytest.mark.requires_chromium

OPERATOR_KEY = "console-operator-key"
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


#: a drop event on the upload zone carrying one file (a DataTransfer built in the page)
DROP = """
const [name, text] = arguments;
const data = new DataTransfer();
data.items.add(new File([text], name, {type: "text/plain"}));
document.getElementById("drop-zone").dispatchEvent(new DragEvent("drop", {dataTransfer: data, bubbles: true}));
"""

#: the console's own upload function on the presigned path (its size limit set to 0): the PUT to storage
#: passes the page's CSP (connect-src) and the bucket's CORS
PRESIGNED = """
const [kbId, text, done] = arguments;
import(new URL("api.js", location.href).href)
  .then((api) => api.uploadFile(kbId, new File([text], "estuary.txt", {type: "text/plain"}), "estuary.txt", null, 0))
  .then((result) => done(result), (error) => done({error: String((error && error.message) || error)}));
"""


#: the console's metadata filter parser (api.js), on one text: its filter, or its error
META = """
const [text, done] = arguments;
import(new URL("api.js", location.href).href)
  .then((api) => done(api.metadataFilter(text)), (error) => done({error: String(error)}))
  .catch((error) => done({error: error.message}));
"""


def shot(driver: Any, name: str) -> None:
    """A screenshot into WEKNORA_CONSOLE_SCREENSHOTS, when set (to look at the pages the test walks)."""
    folder = os.environ.get("WEKNORA_CONSOLE_SCREENSHOTS")
    if folder:
        driver.set_window_size(1280, 900)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


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


def use_link_key(driver: Any) -> None:
    """The console asks before it uses a link's key (test_console_link_keys.py): the person says yes."""
    from selenium.webdriver.common.by import By

    def enabled() -> Any:
        button = driver.find_element(By.ID, "link-key-use")
        return button if button.is_enabled() else None

    wait(driver, enabled, "the question whether to use the link's key").click()


def listed(api: Api, kb_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/knowledge-bases/{kb_id}/knowledge")
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"]["items"])


def run_search(driver: Any) -> dict[str, str]:
    """Clicks Search and waits for the answer: each hit's knowledge id and match type."""
    from selenium.webdriver.common.by import By

    driver.execute_script("document.getElementById('hits').replaceChildren()")
    driver.find_element(By.ID, "search-run").click()
    wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, "#hits .hit, #no-hits"), "the search's answer")
    return {
        hit.get_attribute("data-knowledge-id"): hit.find_element(By.CSS_SELECTOR, ".badge").text
        for hit in driver.find_elements(By.CSS_SELECTOR, "#hits .hit")
    }


def test_the_console_walks_a_document_from_upload_to_delete(
    served: str, runtime: LocalRuntime, services: Services, api: Api, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = requests.get(f"{served}/console/", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    kb = api.create_kb("rivers")

    # signed in by the fragment once the person says so: the key moves to session storage and out of the
    # address bar
    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    wait(browser, lambda: browser.find_element(By.LINK_TEXT, "rivers"), "the knowledge base listed")
    assert "key=" not in browser.current_url
    assert browser.execute_script("return sessionStorage.getItem('weknora.key')") == API_KEY
    wait(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, f"tr[data-kb-id='{kb['id']}'] td.num").text == "0",
        "the knowledge base's stats",
    )
    shot(browser, "0-knowledge-bases")

    # a shared link opens on the knowledge base; the file input uploads
    browser.get(f"{served}/console/#kb={kb['id']}")
    picker = wait(browser, lambda: browser.find_element(By.ID, "file-input"), "the upload zone")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rivers.md"
        path.write_text(TEXT, encoding="utf-8")
        picker.send_keys(str(path))
        row = "#documents tr[data-knowledge-id]"
        wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, row), "the uploaded document's row")
    # and one dropped on the zone (the drop handler, as a drag from the desktop delivers it)
    browser.execute_script(DROP, "tides.txt", "Tides turn twice a day.")
    wait(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, row)) == 2, "the dropped document's row")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#uploads progress")) == 2
    shot(browser, "1-uploaded")
    presigned = browser.execute_async_script(PRESIGNED, kb["id"], "Estuaries mix salt and fresh water.")
    assert presigned.get("presigned") is True, presigned
    knowledge_id = browser.find_element(
        By.XPATH, "//tbody[@id='documents']/tr[.//a[text()='rivers.md']]"
    ).get_attribute("data-knowledge-id")
    runtime.drain(timeout=60)
    states = "return [...document.querySelectorAll('#documents tr[data-knowledge-id]')].map((r) => r.dataset.state)"
    wait(
        browser,
        # the two uploads at least (the presigned one shows up too once its object arrived)
        lambda: len(found := browser.execute_script(states)) >= 2 and set(found) == {"completed"},
        "the rows turn completed (live)",
    )
    shot(browser, "2-completed")
    assert api.knowledge(presigned["knowledge_id"])["parse_status"] == "completed"

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
    shot(browser, "3-document")

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
    shot(browser, "4-search")

    # a filtered search: keyword only, a tag, a file type and a minimum score; each of the three documents
    # matches the query, the tag holds rivers.md and tides.txt, the type tides.txt and estuary.txt
    tag = api.post(f"/knowledge-bases/{kb['id']}/tags", {"name": "water"}).json_body["data"]
    tides_id = next(r["id"] for r in listed(api, kb["id"]) if r["file_name"] == "tides.txt")
    for tagged in (knowledge_id, tides_id):
        edited = api.client.http.put(
            f"/api/v1/knowledge/{tagged}",
            headers={"X-API-Key": API_KEY, "Content-Type": "application/json"},
            body=json.dumps({"tag_ids": [tag["id"]]}),
        )
        assert edited.status_code == 200, edited.json_body
    browser.refresh()  # the same address: a reload reads the new tag
    wait(browser, lambda: browser.find_element(By.ID, "search-query"), "the search box").send_keys(
        f"{WORD} tides estuaries"
    )
    everything = run_search(browser)
    assert set(everything) == {knowledge_id, tides_id, presigned["knowledge_id"]}, everything
    Select(browser.find_element(By.ID, "search-retriever")).select_by_value("keyword")
    browser.find_element(By.ID, "search-min-score").send_keys("0.01")
    browser.find_element(By.ID, "search-types").send_keys("txt")
    wait(
        browser,
        lambda: browser.find_element(By.CSS_SELECTOR, f"#search-tags input[data-tag-id='{tag['id']}']"),
        "the tag's checkbox",
    ).click()
    filtered = run_search(browser)
    assert list(filtered) == [tides_id], filtered
    assert filtered[tides_id] == "keyword"
    shot(browser, "4b-filtered-search")
    # the metadata box's syntax (the CLI's --meta): numbers and booleans as JSON, "quoted" text as text
    parsed = browser.execute_async_script(META, 'dept=ops; year=2024,2025; code="007"; draft=false')
    assert parsed == {"dept": "ops", "year": {"in": [2024, 2025]}, "code": "007", "draft": False}
    assert browser.execute_async_script(META, "no-equals-sign") == {
        "error": 'metadata: expected key=value or key=v1,v2, got "no-equals-sign"'
    }

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

    # an FAQ knowledge base: its entries, its import (inline entries here) with the result
    faq = api.create_kb("answers", type="faq")
    started = api.post(
        f"/knowledge-bases/{faq['id']}/faq/import",
        {"entries": [{"standard_question": "When do tides turn?", "answers": ["Twice a day."]}]},
    )
    assert started.status_code == 202, started.json_body
    runtime.drain(timeout=60)
    browser.get(f"{served}/console/#kb={faq['id']}&tab=faq")
    wait(browser, lambda: "When do tides turn?" in browser.find_element(By.ID, "main").text, "the FAQ entry")
    wait(
        browser, lambda: "Last import" in browser.find_element(By.ID, "faq-import").text, "the import result"
    )
    # an import file through the FAQ page's file input: the presigned form POSTed to storage passes the
    # page's CSP and the bucket's CORS, and the import it starts adds the entry
    with tempfile.TemporaryDirectory() as folder:
        upload = Path(folder) / "answers.json"
        upload.write_text(json.dumps([{"standard_question": "Where do eels spawn?", "answers": ["At sea."]}]))
        chooser = "#main input[type=file][accept='.json,.csv,.xlsx']"
        browser.find_element(By.CSS_SELECTOR, chooser).send_keys(str(upload))
        wait(
            browser, lambda: "import started" in browser.find_element(By.TAG_NAME, "body").text, "the import"
        )
    runtime.drain(timeout=60)
    browser.refresh()  # (the same address again: no hashchange, so no new render)
    wait(
        browser,
        lambda: "Where do eels spawn?" in browser.find_element(By.ID, "main").text,
        "the file's entry",
    )

    # operators: tenants and the dead-letter queues, with the operator key from the fragment
    services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    browser.get(f"{served}/console/#view=admin&operator_key={OPERATOR_KEY}")
    use_link_key(browser)
    wait(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#dlq"), "the dead-letter queues")
    assert "operator_key" not in browser.current_url
    assert browser.find_elements(By.XPATH, "//h2[text()='Tenants']/following-sibling::table//tbody/tr")
    shot(browser, "5-operators")


#: markup in what a tenant names: shown as these characters, never made into elements
HOSTILE = '<img src="x-{where}" onerror="window.__xss=1"><b>bold</b>'


def test_names_and_text_from_tenants_are_shown_as_text_never_as_markup(
    served: str, runtime: LocalRuntime, api: Api, browser: Any
) -> None:
    """Knowledge base names, document titles and Markdown are tenant text: the console puts them in the page
    as text (dom.js), so markup in them shows as written and makes no element; the CSP would stop an inline
    handler anyway, so the test looks for the elements themselves."""
    from selenium.webdriver.common.by import By

    kb_name = HOSTILE.format(where="kb")
    kb = api.create_kb(kb_name)
    title = '<img src="x-title" onerror="window.__xss=1"><b>bold'  # no "/": a title is also a file name
    body = f"# Heading\n\n{HOSTILE.format(where='body')} The otters of the estuary fish at dusk.\n"
    made = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": title, "content": body, "status": "publish"},
    )
    assert made.status_code == 200, made.json_body
    knowledge_id = made.json_body["data"]["id"]
    runtime.drain(timeout=60)
    injected = "return document.querySelectorAll('img[src^=\"x-\"], main b').length"

    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    wait(browser, lambda: browser.find_element(By.LINK_TEXT, kb_name), "the knowledge base's name as text")
    assert browser.execute_script(injected) == 0

    browser.get(f"{served}/console/#kb={kb['id']}")
    row = f"#documents tr[data-knowledge-id='{knowledge_id}']"
    shown = wait(browser, lambda: browser.find_element(By.CSS_SELECTOR, row), "the document's row")
    assert "x-title" in shown.text and browser.execute_script(injected) == 0  # the name, as a file name

    shown.find_element(By.TAG_NAME, "a").click()
    chunk = wait(browser, lambda: browser.find_element(By.CSS_SELECTOR, "#chunks .chunk"), "a chunk")
    assert "otters" in chunk.text
    wait(browser, lambda: "otters" in browser.find_element(By.ID, "markdown").text, "the parsed Markdown")
    markdown = browser.find_element(By.ID, "markdown").text
    assert "otters" in markdown and "<b>bold</b>" in markdown, markdown  # the markup, as characters
    assert browser.execute_script(injected) == 0
    assert browser.execute_script("return window.__xss") is None


def test_faq_entries_page_on_and_a_link_never_swaps_the_signed_in_key(
    served: str, runtime: LocalRuntime, api: Api, browser: Any
) -> None:
    """More entries than a page (50): the first page, then "More entries" for the rest. A `#key=` link
    opened while signed in leaves the stored key alone (it would sign the person in as someone else) and
    still leaves the address bar."""
    from selenium.webdriver.common.by import By

    faq = api.create_kb("many answers", type="faq")
    entries = [{"standard_question": f"Question {i:02d}?", "answers": [f"Answer {i}."]} for i in range(55)]
    started = api.post(f"/knowledge-bases/{faq['id']}/faq/import", {"entries": entries})
    assert started.status_code == 202, started.json_body
    runtime.drain(timeout=120)

    browser.get(f"{served}/console/#key={API_KEY}&kb={faq['id']}&tab=faq")
    use_link_key(browser)
    rows = "#faq-entries tr"
    wait(
        browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 50, "the first page of entries"
    )
    wait(browser, lambda: browser.find_element(By.ID, "faq-more"), "the More entries button").click()
    wait(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, rows)) == 55, "every entry")
    shown = {e.text.split(" ")[1] for e in browser.find_elements(By.CSS_SELECTOR, f"{rows} td:first-child")}
    assert shown == {f"{i:02d}?" for i in range(55)}
    assert not browser.find_elements(By.ID, "faq-more")

    browser.get(f"{served}/console/#key=wk-someone-else&kb={faq['id']}")
    wait(browser, lambda: "key=" not in browser.current_url, "the key out of the address bar")
    assert browser.execute_script("return sessionStorage.getItem('weknora.key')") == API_KEY
    wait(browser, lambda: "ignored" in browser.find_element(By.ID, "toast").text, "the notice")


def test_a_knowledge_base_another_tenant_shared_is_marked_shared_and_an_own_one_is_not(
    served: str, api: Api, services: Services, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    from chalicelib.operations.tenants import create_tenant_with_key

    reader, reader_key = create_tenant_with_key(services, "reader")
    theirs = api.create_kb("Lighthouse handbook")
    shared = api.post(f"/knowledge-bases/{theirs['id']}/shares", {"tenant_id": reader.id})
    assert shared.status_code == 201, shared.json_body
    own = Api(api.client, reader_key).create_kb("Reader notes")
    listed = {
        kb["id"]: kb["shared"] for kb in Api(api.client, reader_key).get("/knowledge-bases").json_body["data"]
    }
    assert listed == {theirs["id"]: True, own["id"]: False}

    browser.get(f"{served}/console/#key={reader_key}")
    use_link_key(browser)
    row = wait(browser, lambda: browser.find_element(By.LINK_TEXT, "Lighthouse handbook"), "the shared one")
    assert "shared" in row.find_element(By.XPATH, "./ancestor::td").text
    mine = browser.find_element(By.LINK_TEXT, "Reader notes").find_element(By.XPATH, "./ancestor::td")
    assert "shared" not in mine.text


#: the console's own API call, `count` times in a row: each must come back with its answer
CALLS = """
const [count, done] = arguments;
import(new URL("api.js", location.href).href)
  .then(async (api) => { for (let i = 0; i < count; i++) await api.get("/knowledge-bases"); return count; })
  .then((answered) => done({answered}), (error) => done({error: String((error && error.message) || error)}));
"""


def test_a_call_the_tenants_rate_limit_refuses_is_sent_again_after_its_wait(
    served: str, api: Api, services: Services, browser: Any
) -> None:
    """At 1 request a second (10 a 10 s window) the console's calls past the window are refused with 429
    tenant_rate_limited before any work: the console waits for Retry-After and sends them again, so a person
    sees a slower page, not an error (its live refresh stopped at the first one)."""
    from chalicelib.operations.tenants import LOCAL_TENANT_ID

    browser.get(f"{served}/console/#key={API_KEY}")
    use_link_key(browser)
    assert services.tenants.set_quotas(LOCAL_TENANT_ID, 0, 0, 1) is not None
    answers = [api.get("/knowledge-bases") for _ in range(11)]  # the window filled: its 11th is refused
    refused = answers[-1]
    assert refused.status_code == 429 and refused.json_body["error"]["code"] == "tenant_rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    browser.set_script_timeout(60)
    result = browser.execute_async_script(CALLS, 3)  # refused at first, then sent again in the next window
    assert result == {"answered": 3}, result
