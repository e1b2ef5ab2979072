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
    """Claims the range starting at page `start` for this invocation: False while another invocation
    holds a claim younger than CLAIM_STALE_AFTER_SECONDS (a duplicate of the range's message: it leaves the
    range to the holder); a stale claim (its parse died) is taken over, so the range is redone. The claim
    is created only if absent and a stale one replaced only if unchanged, so of two copies claiming at
    once exactly one wins, also for a takeover. The claim is read back last: a storage backend without
    conditional writes (an S3-compatible server that ignores them) overwrites instead, and there only
    copies whose write and read-back interleave exactly both parse (see README, "page ranges")."""
    store = files_of(deps, knowledge)
    key = range_key(knowledge, part_name(start, CLAIM))
    url = store.url_for(key)
    token = uuid.uuid4().hex
    claim = json.dumps({"token": token, "claimed_at": time.time()}).encode()
    if not store.save_if_absent(key, claim, "application/json"):
        held = _read_claim(deps, url)
        if held is None:  # released meanwhile: its holder stored the range, or failed and will retry it
            return False
        holder = json.loads(held)
        if time.time() - float(holder.get("claimed_at", 0)) >= CLAIM_STALE_AFTER_SECONDS:
            # of two takers only one replaces it; the read-back tells either which one it was
            store.replace_if_unchanged(key, held, claim, "application/json")
        elif holder.get("token") != token:  # a live parse's (ours if a retried write lost its first answer)
            return False
    read_back = _read_claim(deps, url)
    return read_back is not None and json.loads(read_back).get("token") == token


def _read_claim(deps: Dependencies, url: str) -> bytes | None:
    try:
        return deps.files.read(url)
    except FileNotFoundError:
        return None


def release_range(deps: Dependencies, knowledge: Knowledge, start: int) -> None:
    """Drops the range's claim: its parse stored the range (the Markdown is the "done" mark from then
    on) or failed, and a retry of the message must be able to claim it again at once."""
    deps.files.delete(files_of(deps, knowledge).url_for(range_key(knowledge, part_name(start, CLAIM))))


def clean_up(
    deps: Dependencies, knowledge: Knowledge, attempt: int | None = None, *, keep_plan: bool = False
) -> None:
    """Deletes one attempt's range objects (the plan last, so a redelivered assembly can tell it is done;
    with `keep_plan`, not the plan). The ranges' images stay: the assembled manifest lists them."""
    own = replace(knowledge, attempt=attempt or knowledge.attempt)
    plan = read_plan(deps, own)
    if plan is None:
        return
    for start, _end in plan["ranges"]:
        for suffix in (".md", ".images.json", CLAIM):
            deps.files.delete(files_of(deps, own).url_for(range_key(own, part_name(start, suffix))))
    if plan["source"] != own.file_path:
        deps.files.delete(plan["source"])
    if not keep_plan:
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
