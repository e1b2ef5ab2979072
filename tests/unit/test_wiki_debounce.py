"""The wiki's debounce comes from the settings (spec §1.18: 30 s to an ingest, 20 s to a finalize), clamped to
SQS's 0-900 s; an ingest that leaves ops pending asks again within 5 s."""

from __future__ import annotations

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import memory_deps
from chalicelib.services.dispatch import trigger_wiki
from chalicelib.settings import load_settings


def _delays(env: dict[str, str]) -> list[tuple[str, int]]:
    deps = memory_deps(load_settings(env))
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    trigger_wiki(deps, "kb-1", "ingest")
    trigger_wiki(deps, "kb-1", "ingest", follow_up=True)
    trigger_wiki(deps, "kb-1", "finalize")
    return [(m.json()["action"], m.delay_seconds) for m in queue.sent if m.queue == "wiki"]


def test_the_spec_defaults() -> None:
    assert _delays({}) == [("ingest", 30), ("ingest", 5), ("finalize", 20)]


def test_an_operator_sets_them_within_sqs_bounds() -> None:
    env = {"WEKNORA_WIKI_INGEST_DELAY_SECONDS": "2", "WEKNORA_WIKI_FINALIZE_DELAY_SECONDS": "5000"}
    assert _delays(env) == [("ingest", 2), ("ingest", 2), ("finalize", 900)]
    assert _delays({"WEKNORA_WIKI_INGEST_DELAY_SECONDS": "-3"})[0] == ("ingest", 0)
