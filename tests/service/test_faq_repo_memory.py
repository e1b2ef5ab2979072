"""The FaqRepo contract on the in-memory fake."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryFaqRepo
from chalicelib.ports import FaqRepo

from .faq_repo_contract import FaqRepoContract


class TestMemoryFaqRepo(FaqRepoContract):
    @pytest.fixture
    def faq(self) -> FaqRepo:
        return MemoryFaqRepo()
