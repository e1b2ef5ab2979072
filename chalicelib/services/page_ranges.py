"""A large PDF parsed as page ranges in parallel: a fan-out on the docreader queue, then one assembly.

1. The docreader finds more than `parse_parallel_pages` pages: it stores a plan (source, engine, ranges)
   beside the attempt's Markdown and sends one docreader message per range.
2. Each range message parses its pages (scanned ones OCR'd there), stores the range's Markdown and images
   and records a sub-span. The range's Markdown object is its "done" mark: a redelivered range finds it
   and parses nothing again. The range that finds every range stored sends the assembly message.
3. The assembly puts the ranges together in page order and goes on like a whole-document parse, then
   removes the range objects (the plan last); an assembly whose attempt ended meanwhile keeps the plan, by
   which a later removal finds what a range still running writes.
Duplicate assembly messages are harmless: the Markdown and manifest are written once (the docreader's
`_store_outputs`) and chunking is idempotent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Knowledge, SpanStatus, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ReadRequest, ResolvedImages
from chalicelib.services import resources
from chalicelib.services.fairness import keep_place
from chalicelib.services.liveness import live_knowledge
from chalicelib.services.page_range_store import (
    PLAN,
    claim_range,
    part_name,
    range_key,
    read_plan,
    release_range,
)
from chalicelib.services.stage_queue import enqueue
from chalicelib.services.storage import files_of
from chalicelib.services.stored_size import kept_parse_write


def ranges_of(pages: int, size: int) -> list[tuple[int, int]]:
    size = max(1, size)
    return [(start, min(pages, start + size)) for start in range(0, pages, size)]


def fan_out(
    deps: Dependencies,
    knowledge: Knowledge,
    message: StageMessage,
    request: ReadRequest,
    title: str,
    pages: int,
) -> None:
    """Stores the plan and sends a message per range (the whole document is not parsed here)."""
    source = knowledge.file_path or files_of(deps, knowledge).save(
        range_key(knowledge, "source.pdf"), request.data
    )
    ranges = ranges_of(pages, deps.settings.parse_range_pages)
    plan = {
        "source": source,
        "file_name": request.file_name,
        "engine": request.engine,
        "options": {k: v for k, v in request.options.items() if k != "page_range"},
        "title": title,
        "pages": pages,
        "ranges": ranges,
    }
    files_of(deps, knowledge).save(range_key(knowledge, PLAN), json.dumps(plan).encode(), "application/json")
    deps.tracker.progress(
        knowledge, Stage.DOCREADER, {"pages_parsed": 0, "pages_total": pages, "ranges": len(ranges)}
    )
    for start, end in ranges:
        enqueue(deps, Stage.DOCREADER, replace(message, page_start=start, page_end=end))


def parse_range(
    deps: Dependencies,
    message: StageMessage,
    store_images: Callable[[Knowledge, Any], ResolvedImages],
) -> None:
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return
    keep_place(deps, knowledge)  # a long scan's ranges keep the tenant's place, as later stages do
    plan = read_plan(deps, knowledge)
    if plan is None:  # assembled already (the plan goes last), or a message from before the plan
        logger.info("page range without a plan: dropped", extra={"knowledge_id": knowledge.id})
        return
    start, end = message.page_start, message.page_end
    markdown_url = files_of(deps, knowledge).url_for(range_key(knowledge, part_name(start, ".md")))
    if not deps.files.exists(markdown_url):
        # claimed before the parse: a duplicate of this message run meanwhile (a second fan-out, an
        # at-least-once copy) leaves the range to its holder instead of OCR-ing every page again
        if not claim_range(deps, knowledge, start):
            logger.info(
                "page range held by another parse: left to it",
                extra={"knowledge_id": knowledge.id, "page_start": start},
            )
            return
        try:
            # stored meanwhile by the holder whose claim this one followed: nothing left to parse
            kept = deps.files.exists(markdown_url) or _parse_and_store(
                deps, knowledge, plan, start, end, markdown_url, store_images
            )
        finally:
            release_range(deps, knowledge, start)  # done (the Markdown marks it) or failed: a retry claims it
        if not kept:
            return
    done = [
        (a, b)
        for a, b in plan["ranges"]
        if deps.files.exists(files_of(deps, knowledge).url_for(range_key(knowledge, part_name(a, ".md"))))
    ]
    pages_parsed = sum(b - a for a, b in done)
    deps.tracker.progress(
        knowledge,
        Stage.DOCREADER,
        {"pages_parsed": pages_parsed, "pages_total": plan["pages"], "ranges": len(plan["ranges"])},
    )
    if len(done) == len(plan["ranges"]):
        enqueue(deps, Stage.DOCREADER, replace(message, page_start=0, page_end=0, assemble=True))


def _parse_and_store(
    deps: Dependencies,
    knowledge: Knowledge,
    plan: dict[str, Any],
    start: int,
    end: int,
    markdown_url: str,
    store_images: Callable[[Knowledge, Any], ResolvedImages],
) -> bool:
    """Parses pages [start, end), stores the range's image list, then its Markdown (the "done" mark), and
    records the range's sub-span; False when the document moved on meanwhile (what was written is
    undone, unless the attempt was cancelled)."""
    result = deps.docreader().read(
        ReadRequest(
            data=deps.files.read(plan["source"]),
            file_name=str(plan["file_name"]),
            file_type="pdf",
            engine=str(plan["engine"]),
            options={**plan["options"], "page_range": [start, end]},
        )
    )
    resolved = store_images(knowledge, result)
    images = [image_record(image) for image in resolved.images]
    manifest_url = files_of(deps, knowledge).save(
        range_key(knowledge, part_name(start, ".images.json")),
        json.dumps(images).encode(),
        "application/json",
    )
    files_of(deps, knowledge).save(
        range_key(knowledge, part_name(start, ".md")), resolved.markdown.encode(), "text/markdown"
    )

    def undo() -> None:
        written = (markdown_url, manifest_url, *(str(image["url"]) for image in images))
        resources.release_urls(deps, written)  # the images registered as they were stored
        for url in written:
            deps.files.delete(url)

    if not kept_parse_write(deps, knowledge, undo):
        return False
    deps.tracker.subspan(
        knowledge,
        Stage.DOCREADER,
        f"docreader.pages[{start + 1}-{end}]",
        SpanStatus.DONE,
        {
            "pages": end - start,
            "markdown_chars": len(resolved.markdown),
            "images": len(images),
            "scanned_pages": len(result.metadata.get("scanned_pages") or []),
        },
    )
    return True


def image_record(image: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(image)


def assemble(
    deps: Dependencies, message: StageMessage
) -> tuple[Knowledge, str, list[dict[str, Any]], dict[str, Any]] | None:
    """(knowledge, Markdown in page order, images, span outputs); None when there is nothing to do."""
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return None
    keep_place(deps, knowledge)
    plan = read_plan(deps, knowledge)
    if plan is None:
        parsed = files_of(deps, knowledge).url_for(
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
        )
        if deps.files.exists(parsed):  # assembled and cleaned up: make sure chunking was asked for
            enqueue(deps, Stage.CHUNKING, replace(message, assemble=False))
        return None
    parts: list[str] = []
    images: list[dict[str, Any]] = []
    for start, _end in plan["ranges"]:
        try:
            parts.append(
                deps.files.read(
                    files_of(deps, knowledge).url_for(range_key(knowledge, part_name(start, ".md")))
                ).decode()
            )
            images += json.loads(
                deps.files.read(
                    files_of(deps, knowledge).url_for(range_key(knowledge, part_name(start, ".images.json")))
                )
            )
        except FileNotFoundError:
            logger.info(
                "assembly before every range is stored: dropped", extra={"knowledge_id": knowledge.id}
            )
            return None
    markdown = "\n\n".join(part.strip() for part in parts if part.strip())
    outputs = {
        "pages_parsed": plan["pages"],
        "pages_total": plan["pages"],
        "ranges": len(plan["ranges"]),
        "title": plan["title"],
        "engine": plan["engine"] or "default",
    }
    return knowledge, markdown + "\n" if markdown else "", images, outputs
