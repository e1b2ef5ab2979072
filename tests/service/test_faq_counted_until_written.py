"""An FAQ import batch or clone slice counts its new entries' bytes before it writes their rows; a failure
anywhere in between (a count that does not answer partway, the tag writes, the row write) gives back what
the rows not written counted, so the redelivery, which counts them again, counts them once. Before, only a
failed row write gave them back: a tag write that failed once left them counted twice for good."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries as faq
from chalicelib.faq.commands import FaqEntryRequest
from chalicelib.ports import ServiceUnreachable

from .faq_support import faq_kb_named
from .test_faq import entries_of, run_import
from .test_faq_import_reservations import clone_into
from .test_faq_storage_counting import used


def fails_once(real: Callable[..., Any], *, on_call: int = 1, kb_id: str | None = None) -> Callable[..., Any]:
    """`real`, but its `on_call`-th call (for `kb_id` only, when given) raises ServiceUnreachable."""
    calls = {"n": 0}

    def flaky(first: str, *args: Any, **kwargs: Any) -> Any:
        if kb_id is None or first == kb_id:
            calls["n"] += 1
            if calls["n"] == on_call:
                raise ServiceUnreachable("DynamoDB did not answer")
        return real(first, *args, **kwargs)

    return flaky


def stored_bytes(deps: Services, kb: KnowledgeBase) -> int:
    return sum(e.counted_bytes for e in entries_of(deps, kb).values())


@pytest.mark.parametrize(
    ("repo", "method", "on_call"),
    [("faq", "link_tags", 1), ("tenants", "add_usage_within", 2), ("faq", "put_entries", 1)],
)
def test_an_import_batch_that_fails_before_its_rows_are_written_counts_them_once(
    deps: Services,
    faq_kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    repo: str,
    method: str,
    on_call: int,
) -> None:
    target = getattr(deps, repo)
    monkeypatch.setattr(target, method, fails_once(getattr(target, method), on_call=on_call))
    rows = [{"standard_question": f"q{i}", "answers": ["a" * 28], "tags": ["t"]} for i in range(3)]
    view = run_import(deps, faq_kb, rows)
    assert view["progress"]["added"] == 3, view["progress"]
    assert used(deps, faq_kb) == stored_bytes(deps, faq_kb) > 0


@pytest.mark.parametrize(
    ("repo", "method", "on_call"),
    [("faq", "add_tags", 1), ("faq", "link_tags", 1), ("tenants", "add_usage_within", 2)],
)
def test_a_clone_slice_that_fails_before_its_copies_are_written_counts_them_once(
    deps: Services,
    tenant: Tenant,
    faq_kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    repo: str,
    method: str,
    on_call: int,
) -> None:
    target = faq_kb_named(deps, tenant, "mirror")
    for question in ("Where is the office?", "Is there parking?"):  # tagged: the copies write tags
        faq.create_entry(
            deps,
            tenant.id,
            faq_kb.id,
            FaqEntryRequest(standard_question=question, answers=["a" * 40], tags=["t"]),
        )
    before = used(deps, target)  # the source's entries only
    real = getattr(deps, repo)
    only = target.id if repo == "faq" else None
    monkeypatch.setattr(real, method, fails_once(getattr(real, method), on_call=on_call, kb_id=only))
    view = clone_into(deps, faq_kb, target)
    monkeypatch.undo()
    assert view["status"] == "completed", view
    assert len(entries_of(deps, target)) == 2
    assert used(deps, target) == before + stored_bytes(deps, target)
