"""A `#key=` link never signs a tab in by itself: anyone can send one, and a fresh tab (its session storage
empty) signed in by it would work in the sender's tenant, where what the person uploads goes. The console
takes the key out of the address bar, asks in the page whether to use it, naming the key's end and what it
reaches (looked up with that key), and uses it only on a yes; the header names the key the tab works with."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import API_KEY, Api
from .test_console_browser import browser, served, shot, wait  # noqa: F401 - fixtures

pytestmark = pytest.mark.requires_chromium

STORED = "return sessionStorage.getItem('weknora.key')"


def question(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    return wait(driver, lambda: driver.find_element(By.ID, "link-keys"), "the question about the link's key")


def test_a_link_s_key_is_used_only_once_the_person_says_so(
    served: str,  # noqa: F811
    api: Api,
    other_api: Api,
    browser: Any,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    api.create_kb("my ledgers")
    theirs = other_api.create_kb("their planted kb")

    # someone else's link in a fresh tab: not signed in, the key out of the address bar, the question asked
    browser.get(f"{served}/console/#key={other_api.api_key}&kb={theirs['id']}")
    card = question(browser)
    wait(browser, lambda: "their planted kb" in card.text, "what the link's key reaches")
    assert "key=" not in browser.current_url and f"kb={theirs['id']}" in browser.current_url
    assert browser.execute_script(STORED) is None
    assert f"API key …{other_api.api_key[-4:]}" in card.text and other_api.api_key not in card.text
    assert browser.find_element(By.ID, "signed-in").text == ""
    shot(browser, "link-key-question")
    browser.find_element(By.ID, "link-key-ignore").click()
    wait(browser, lambda: browser.find_element(By.ID, "api-key"), "the sign-in form")
    assert browser.execute_script(STORED) is None

    # a key the API refuses: said so, and it cannot be chosen
    browser.get(f"{served}/console/#key=wk-not-a-key")
    card = question(browser)
    wait(browser, lambda: "not usable (invalid_api_key)" in card.text, "the refusal")
    assert not browser.find_element(By.ID, "link-key-use").is_enabled()
    browser.find_element(By.ID, "link-key-ignore").click()

    # the person's own link: used on their yes, and the header says which key the tab works with
    browser.get(f"{served}/console/#key={API_KEY}")
    card = question(browser)
    wait(browser, lambda: "my ledgers" in card.text, "what the person's key reaches")
    wait(browser, lambda: browser.find_element(By.ID, "link-key-use").is_enabled(), "the key usable")
    browser.find_element(By.ID, "link-key-use").click()
    wait(browser, lambda: browser.find_element(By.LINK_TEXT, "my ledgers"), "the knowledge bases")
    assert browser.execute_script(STORED) == API_KEY
    assert browser.find_element(By.ID, "signed-in").text == f"signed in: API key …{API_KEY[-4:]}"
    shot(browser, "link-key-signed-in")
