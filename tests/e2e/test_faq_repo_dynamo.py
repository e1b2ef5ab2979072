"""The FaqRepo contract on the DynamoDB adapter (the faq table on moto, provisioned from the template)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service.faq_repo_contract import FaqRepoContract

from chalicelib.bootstrap import get_deps, set_deps
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import FaqRepo


@pytest.fixture(scope="module")
def table(_runtime: LocalRuntime) -> Iterator[FaqRepo]:
    _runtime.reset(clear_state=True)
    set_deps(None)
    yield get_deps().faq
    set_deps(None)


class TestDynamoFaqRepo(FaqRepoContract):
    @pytest.fixture
    def faq(self, table: FaqRepo) -> FaqRepo:
        return table
