"""The operators' page lists a tenant's API keys page after page (`GET /admin/tenants/{id}/api-keys` is paged:
`next_cursor` beside `data`): it showed the first page only. Keys on the local stack's DynamoDB (moto)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTenantRequest, IssueKeyRequest
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations import admin

from .test_console_browser import OPERATOR_KEY, browser, served, use_link_key, wait

pytestmark = pytest.mark.requires_chromium
__all__ = ["browser", "served"]  # fixtures


def test_the_operators_page_lists_every_key_of_a_tenant_over_pages(
    served: str, runtime: LocalRuntime, services: Services, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    tenant, _, _ = admin.create_tenant(services, CreateTenantRequest(name="paged-keys-tenant"))
    for n in range(6):
        admin.issue_key(services, tenant.id, IssueKeyRequest(name=f"paged-key-{n}"))
    every = admin.list_keys(services, tenant.id)
    one = max(len(json.dumps(admin.key_view(k))) + 1 for k in every)
    monkeypatch.setattr(admin, "KEYS_PAGE_MAX_BYTES", 2 * one + 1, raising=False)  # two keys a page

    browser.get(f"{served}/console/#view=admin&operator_key={OPERATOR_KEY}")
    use_link_key(browser)
    wait(
        browser, lambda: browser.find_elements(By.XPATH, "//button[text()='paged-keys-tenant']"), "the tenant"
    )
    browser.find_element(By.XPATH, "//button[text()='paged-keys-tenant']").click()

    def rows() -> Any:
        found = browser.find_elements(By.CSS_SELECTOR, "#tenant-keys table tbody tr")
        return found if len(found) == len(every) else None

    wait(browser, rows, f"the tenant's {len(every)} keys")
    shown = browser.find_element(By.ID, "tenant-keys").text
    assert all(k.id in shown for k in every)


def test_the_operators_page_lists_every_tenant_over_pages(
    served: str, runtime: LocalRuntime, services: Services, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GET /admin/tenants` is paged too: the page showed the tenants of its first page only."""
    from selenium.webdriver.common.by import By

    services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    made = [admin.create_tenant(services, CreateTenantRequest(name=f"paged-tenant-{n}"))[0] for n in range(5)]
    every = services.tenants.page("", 1000)
    one = max(len(json.dumps(admin.tenant_view(t))) + 1 for t in every)
    monkeypatch.setattr(admin, "TENANTS_PAGE_MAX_BYTES", 2 * one + 1)  # two tenants a page

    browser.get(f"{served}/console/#view=admin&operator_key={OPERATOR_KEY}")
    use_link_key(browser)

    def buttons() -> Any:
        found = [t for t in made if browser.find_elements(By.XPATH, f"//button[text()='{t.name}']")]
        return found if len(found) == len(made) else None

    wait(browser, buttons, f"the {len(made)} tenants' buttons")
