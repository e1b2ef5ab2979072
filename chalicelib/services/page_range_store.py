"""Where a large PDF's page ranges are stored (plan, each range's Markdown and images), and how they are
listed and removed. Kept apart from the parsing (`page_ranges`) so a delete does not load the parsers."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import Any

from chalicelib.domain.storage_keys import page_range_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.storage import files_of

PLAN = "plan.json"
#: a range's claim (`pages-000100.claim.json`): which parse holds the range and since when
CLAIM = ".claim.json"
#: a claim older than this was held by an invocation that died: the docreader function times out at
#: 900 s; the queue's visibility timeout (5,400 s) brings the range's message back well after that
CLAIM_STALE_AFTER_SECONDS = 900 + 60


def range_key(knowledge: Knowledge, part: str) -> str:
    return page_range_key(knowledge.tenant_id, knowledge.id, knowledge.attempt, part)


def part_name(start: int, suffix: str) -> str:
    return f"pages-{start:06d}{suffix}"


def read_plan(deps: Dependencies, knowledge: Knowledge) -> dict[str, Any] | None:
    url = files_of(deps, knowledge).url_for(range_key(knowledge, PLAN))
    try:
        plan: dict[str, Any] = json.loads(deps.files.read(url))
    except FileNotFoundError:
        return None
    return plan


def claim_range(deps: Dependencies, knowledge: Knowledge, start: int) -> bool:
    """Claims the range starting at page `start` for this invocation: False while
    another invocation holds a claim younger than CLAIM_STALE_AFTER_SECONDS (a duplicate of the range's
    message: it leaves the range to the holder; a stale claim is taken over, so a range whose parse
    died is redone). The FileStore port has no create-if-absent, so the claim is written and read back:
    of two copies that write it at the same moment the later writer wins, which narrows the double
    parse to copies whose check, write and read-back interleave exactly (see README, "page ranges")."""
    key = range_key(knowledge, part_name(start, CLAIM))
    url = files_of(deps, knowledge).url_for(key)
    held = _read_claim(deps, url)
    if held and time.time() - float(held.get("claimed_at", 0)) < CLAIM_STALE_AFTER_SECONDS:
        return False
    token = uuid.uuid4().hex
    files_of(deps, knowledge).save(
        key, json.dumps({"token": token, "claimed_at": time.time()}).encode(), "application/json"
    )
    # gone again: its holder released it (stored the range, or failed and will retry it)
    return _read_claim(deps, url).get("token") == token


def _read_claim(deps: Dependencies, url: str) -> dict[str, Any]:
    try:
        claim: dict[str, Any] = json.loads(deps.files.read(url))
    except FileNotFoundError:
        return {}
    return claim


def release_range(deps: Dependencies, knowledge: Knowledge, start: int) -> None:
    """Drops the range's claim: its parse stored the range (the Markdown is the "done" mark from then
    on) or failed, and a retry of the message must be able to claim it again at once."""
    deps.files.delete(files_of(deps, knowledge).url_for(range_key(knowledge, part_name(start, CLAIM))))


def clean_up(deps: Dependencies, knowledge: Knowledge, attempt: int | None = None) -> None:
    """Deletes one attempt's range objects (the plan last, so a redelivered assembly can tell it is done).
    The ranges' images stay: the assembled manifest lists them."""
    own = replace(knowledge, attempt=attempt or knowledge.attempt)
    plan = read_plan(deps, own)
    if plan is None:
        return
    for start, _end in plan["ranges"]:
        for suffix in (".md", ".images.json", CLAIM):
            deps.files.delete(files_of(deps, own).url_for(range_key(own, part_name(start, suffix))))
    if plan["source"] != own.file_path:
        deps.files.delete(plan["source"])
    deps.files.delete(files_of(deps, own).url_for(range_key(own, PLAN)))


def range_objects(deps: Dependencies, knowledge: Knowledge, attempt: int) -> list[str]:
    """Everything an unfinished range parse of `attempt` stored (for a delete): plan, parts, images."""
    own = replace(knowledge, attempt=attempt)
    plan = read_plan(deps, own)
    if plan is None:
        return []
    urls: list[str] = []
    for start, _end in plan["ranges"]:
        manifest = files_of(deps, own).url_for(range_key(own, part_name(start, ".images.json")))
        if deps.files.exists(manifest):
            urls += [str(image["url"]) for image in json.loads(deps.files.read(manifest))]
        urls += [
            manifest,
            *(
                files_of(deps, own).url_for(range_key(own, part_name(start, suffix)))
                for suffix in (".md", CLAIM)
            ),
        ]
    if plan["source"] != own.file_path:
        urls.append(str(plan["source"]))
    return [*urls, files_of(deps, own).url_for(range_key(own, PLAN))]
