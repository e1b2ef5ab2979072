"""Where a large PDF's page ranges are stored (plan, each range's Markdown and images), and how they are
listed and removed. Kept apart from the parsing (`page_ranges`) so a delete does not load the parsers."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from chalicelib.domain.storage_keys import page_range_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.storage import files_of

PLAN = "plan.json"


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


def clean_up(deps: Dependencies, knowledge: Knowledge, attempt: int | None = None) -> None:
    """Deletes one attempt's range objects (the plan last, so a redelivered assembly can tell it is done).
    The ranges' images stay: the assembled manifest lists them."""
    own = replace(knowledge, attempt=attempt or knowledge.attempt)
    plan = read_plan(deps, own)
    if plan is None:
        return
    for start, _end in plan["ranges"]:
        for suffix in (".md", ".images.json"):
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
        urls += [manifest, files_of(deps, own).url_for(range_key(own, part_name(start, ".md")))]
    if plan["source"] != own.file_path:
        urls.append(str(plan["source"]))
    return [*urls, files_of(deps, own).url_for(range_key(own, PLAN))]
