"""`restart_attempt(unindexed=True)`'s contract, on the in-memory fake (tests/service) and on DynamoDB (tests/e2e):
a restart that removes the dead attempt's outputs holds only while that attempt was never indexed."""

from __future__ import annotations

from chalicelib.domain.types import IN_FLIGHT_STATUSES, ParseStatus

from .repo_contract import Repos, row

IN_FLIGHT = frozenset(IN_FLIGHT_STATUSES)


class RestartContract:
    def test_a_restart_of_an_unindexed_attempt_holds_only_while_it_is_unindexed(self, repos: Repos) -> None:
        k = row()
        repos.knowledge.insert(k)
        repos.knowledge.begin_processing(k.id, 1)
        fresh = repos.knowledge.restart_attempt(k.id, 1, IN_FLIGHT, unindexed=True)
        assert fresh is not None and (fresh.attempt, fresh.parse_status) == (2, ParseStatus.PENDING)
        assert repos.knowledge.restart_attempt(k.id, 1, IN_FLIGHT, unindexed=True) is None  # moved on
        repos.knowledge.begin_processing(k.id, 2)
        assert repos.knowledge.mark_indexed(k.id, 2, chunk_count=1, storage_size=10, completed=False)
        assert repos.knowledge.restart_attempt(k.id, 2, IN_FLIGHT, unindexed=True) is None  # indexed
        stored = repos.knowledge.get(k.id)
        assert stored is not None and stored.attempt == 2 and stored.processed_at is not None
        restarted = repos.knowledge.restart_attempt(k.id, 2, IN_FLIGHT)  # an indexed one restarts as before
        assert restarted is not None and restarted.attempt == 3 and restarted.processed_at is None
