"""`replace_all` within one attempt's chunk-id range on DynamoDB (moto): the same assertions the in-memory
fake passes in tests/service/test_chunking_superseded.py."""

from __future__ import annotations

from service.repo_contract import new_id
from service.test_chunking_superseded import check_replace_within_an_attempt

from chalicelib.bootstrap import Services


def test_a_replace_within_an_attempt_leaves_other_attempts_chunks(module_services: Services) -> None:
    check_replace_within_an_attempt(module_services.chunks, new_id())
