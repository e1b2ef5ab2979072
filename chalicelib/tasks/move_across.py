"""A move into a knowledge base bound to another storage backend takes the document's objects along.

Every object keeps its key and changes only its backend, so an object's URL on the other backend is known
without a table, and each step repeats safely under a redelivered task:

    copy   every object of the document (source, each attempt's Markdown and image manifest, images) is
           written to the target's backend; the Markdown and manifests with their links rewritten
    link   the chunks' links are rewritten, then the row takes the new file_path, storage_backend and
           links in one write: the commit (a redelivery that finds the row on the new backend copies nothing)
    clean  the new objects are registered in the resource catalog, the resources over the old ones marked
           deleted (their download links stop working), and the old objects deleted from the old backend,
           with the default store's signed copies

Until the commit every link still names an old object, which stays until after it.

Before its first copy a move records the keys it copies and both backends in the files bucket (merged with
what an unfinished earlier move recorded), and forgets them once the old objects are gone: no row names the
copies before the commit, nor the old objects after it, so a delete that lands in between (a delivery
that died, or one that is still copying) finds them there (`remove_carried`, from `tasks/delete.py`).
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import replace
from typing import Any

from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.types import Knowledge
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, UnknownStorageBackend
from chalicelib.services import resources
from chalicelib.services.stored_objects import drop_signed_copies, stored_objects

#: objects copied at once (each a read from one backend and a write to the other)
COPY_THREADS = 8


def relinker(links: dict[str, str]) -> Callable[[Any], Any]:
    """A function that replaces every stored-object link of `links` in a string or a JSON value by its
    counterpart, in one pass (the longest link first, so one that begins another is not replaced in it)."""
    if not links:
        return lambda value: value
    pattern = re.compile("|".join(re.escape(url) for url in sorted(links, key=len, reverse=True)))

    def rewrite(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(lambda found: links[found.group(0)], value)
        if isinstance(value, dict):
            return {k: rewrite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        return value

    return rewrite


def counterpart(deps: Dependencies, url: str, from_backend: str, to_backend: str) -> str | None:
    """The URL the object of `url` (on `from_backend`) has on `to_backend` under the same key; None for a
    URL of any other backend or store."""
    if backend_of(url) != from_backend:
        return None
    try:
        key = deps.files.backend(from_backend).key_of(url)
    except ValueError:  # the default store's scheme but another bucket (none is expected)
        return None
    return deps.files.backend(to_backend).url_for(key)


def _old_objects(deps: Dependencies, row: Knowledge, old: str, new: str) -> list[str]:
    """The document's objects as URLs on the old backend, wherever its links point now (a redelivery may
    find the chunks, or the whole row, already on the new one)."""
    found = []
    for url in stored_objects(deps, row):
        back = counterpart(deps, url, new, old)
        found.append(url if back is None else back)
    return [url for url in dict.fromkeys(found) if backend_of(url) == old]


def carry_objects(deps: Dependencies, row: Knowledge, old: str, new: str) -> Knowledge:
    """Moves the document's objects from backend `old` to `new` (see the module docstring); returns the
    row as it is after. Idempotent: a repeat after the commit only cleans up again."""
    if row.storage_backend not in (old, new):
        logger.warning(
            "a moved document is on neither backend of its move: its objects stay where they are",
            extra={"knowledge_id": row.id, "storage_backend": row.storage_backend},
        )
        return row
    try:
        links = {url: str(counterpart(deps, url, old, new)) for url in _old_objects(deps, row, old, new)}
    except UnknownStorageBackend as error:  # the operator removed the old backend: nothing can be read
        logger.warning(
            "a moved document's old storage backend is not configured: its objects stay where they are",
            extra={"knowledge_id": row.id, "storage_backend": old, "error": str(error)},
        )
        return row
    if row.storage_backend == old:
        relink = relinker(links)
        _record_carried(deps, row.id, [old, new], [deps.files.backend(old).key_of(url) for url in links])
        _copy(deps, row, links, relink)
        _relink_chunks(deps, row, relink)
        committed = deps.knowledge.update_fields(
            row.id,
            {
                "file_path": links.get(row.file_path, row.file_path),
                "storage_backend": new,
                "description": relink(row.description),
                "metadata": relink(row.metadata),
            },
        )
        if committed is None:
            # deleted meanwhile: the row never named the copies, and a delete that read the record while
            # they were being written may have missed some; they go here and the delete removes the rest
            for moved in links.values():
                deps.files.delete(moved)
            remove_carried(deps, row.id, keep=(old, new))
            return row
        row = committed
        logger.info(
            "moved a document's objects to another backend",
            extra={
                "knowledge_id": row.id,
                "from": old or "default",
                "to": new or "default",
                "objects": len(links),
            },
        )
    resources.register_stored(deps, row)  # before the old ones go: a download link always has a file
    resources.release_stored_on(deps, row.id, old)
    for url in links:
        deps.files.delete(url)
    drop_signed_copies(deps, replace(row, storage_backend=old), list(links))
    remove_carried(deps, row.id, keep=(old, new), row=row)  # and any an earlier unfinished move left
    return row


#: where a move across backends records what it copies (the files bucket), one object per document
CARRIED_PREFIX = "move-across/"


def _carried_url(deps: Dependencies, knowledge_id: str) -> str:
    return deps.inbox.url_for(f"{CARRIED_PREFIX}{knowledge_id}.json")


def _read_carried(deps: Dependencies, knowledge_id: str) -> tuple[list[str], list[str]]:
    """The backends and the keys a move recorded for the document; none when nothing is recorded."""
    try:
        record = json.loads(deps.inbox.read(_carried_url(deps, knowledge_id)))
    except FileNotFoundError:
        return [], []
    return [str(name) for name in record["backends"]], [str(key) for key in record["keys"]]


def _record_carried(deps: Dependencies, knowledge_id: str, backends: list[str], keys: list[str]) -> None:
    """Written before the first copy; merged with an earlier record (a move that never finished, whose
    copies the row does not name either)."""
    had_backends, had_keys = _read_carried(deps, knowledge_id)
    record = {
        "backends": sorted({*had_backends, *backends}),
        "keys": list(dict.fromkeys([*had_keys, *keys])),  # in order: an image before its manifest
    }
    deps.inbox.save(f"{CARRIED_PREFIX}{knowledge_id}.json", json.dumps(record).encode(), "application/json")


def remove_carried(
    deps: Dependencies, knowledge_id: str, *, keep: tuple[str, ...] = (), row: Knowledge | None = None
) -> None:
    """Deletes the objects a move recorded (`_record_carried`) on every recorded backend but those of
    `keep`, with a `local://` default store's signed copies of them (given the `row`), then the record.
    For a delete, `keep` is the backend the row names (the delete takes its objects there); for a retried
    move that finds the row gone, nothing. Idempotent: a crash before the record goes repeats it all."""
    backends, keys = _read_carried(deps, knowledge_id)
    for name in backends:
        if name in keep:
            continue
        try:
            store = deps.files.backend(name)
        except UnknownStorageBackend:  # the operator removed it: what is there is theirs
            logger.warning(
                "a moved document's copies are on a storage backend that is no longer configured",
                extra={"knowledge_id": knowledge_id, "storage_backend": name},
            )
            continue
        urls = [store.url_for(key) for key in keys]
        for url in urls:
            deps.files.delete(url)
        if row is not None:
            drop_signed_copies(deps, replace(row, storage_backend=name), urls)
    if backends:
        deps.inbox.delete(_carried_url(deps, knowledge_id))


def _copy(deps: Dependencies, row: Knowledge, links: dict[str, str], relink: Callable[[Any], Any]) -> None:
    """Each object read from the old backend and written to the new one (no store copies across backends);
    a derived text (Markdown, a manifest, a range plan) with its links rewritten. A missing object is left
    out: its link was already broken, and stays so."""

    def one(url: str, moved: str) -> None:
        try:
            data = deps.files.read(url)
        except FileNotFoundError:
            logger.warning("a moved document's object is missing", extra={"knowledge_id": row.id, "url": url})
            return
        store = deps.files.backend(backend_of(moved))
        key = store.key_of(moved)
        if url != row.file_path and key.endswith((".md", ".json")):  # never the user's own file
            data = relink(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        store.save(key, data, mimetypes.guess_type(key)[0] or "application/octet-stream")

    with ThreadPoolExecutor(max_workers=COPY_THREADS, thread_name_prefix="carry") as pool:
        # a pool thread starts with an empty context: the meter (and the local function name) go along
        futures = [pool.submit(copy_context().run, one, url, moved) for url, moved in links.items()]
        for future in futures:
            future.result()


def _relink_chunks(deps: Dependencies, row: Knowledge, relink: Callable[[Any], Any]) -> None:
    changed = []
    for chunk in deps.chunks.list(row.id):
        relinked = replace(
            chunk,
            content=relink(chunk.content),
            metadata=relink(chunk.metadata),
            image_info=relink(chunk.image_info),
        )
        if relinked != chunk:
            changed.append(relinked)
    if changed:
        deps.chunks.put_many(changed)
