"""A document's tags, checked against its knowledge base and kept in step with the relations that make
filtering by tag a query.

The row's `tag_ids` is what a document's tags are; a relation (tag, created_at, knowledge) is the index the
listing reads. Relations are written before the row and removed after it, so a crash leaves at most a stale
relation, which the listing drops by checking the row.
"""

from __future__ import annotations

from collections.abc import Sequence

from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest, NotFound
from chalicelib.domain.tags import MAX_TAGS_PER_DOCUMENT
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies

#: a tag being deleted: no new document may get it
DELETING = "deleting"
#: up to this many tag ids are checked one read each; more, against the knowledge base's list
FEW = 5


def check_tag_ids(
    deps: Dependencies, kb_id: str, tag_ids: Sequence[str], *, strict: bool = True
) -> list[str]:
    """The ids, deduplicated, each a live tag of this knowledge base. Strict: an unknown one is a 400;
    otherwise it is dropped (a presigned upload whose tag was deleted while the file travelled)."""
    wanted = list(dict.fromkeys(tag_ids))
    if not wanted:
        return []
    if len(wanted) <= FEW:  # the usual one to three: a read each, not the knowledge base's whole list
        found = (deps.tags.get(kb_id, t) for t in wanted)
        live = {t.id for t in found if t is not None and t.status != DELETING}
    else:
        live = {t.id for t in deps.tags.list_kb(kb_id) if t.status != DELETING}
    unknown = [t for t in wanted if t not in live]
    if unknown and strict:
        raise BadRequest(
            f"unknown tag id(s) for this knowledge base: {', '.join(unknown[:10])}",
            code="unknown_tag_id",
            data={"unknown": unknown},
        )
    return [t for t in wanted if t in live]


def relate_new(deps: Dependencies, knowledge: Knowledge) -> None:
    """Before a new row is inserted: its relations (removed again by `unrelate_all` if the insert fails)."""
    if knowledge.tag_ids:
        deps.tags.relate(knowledge.kb_id, knowledge.id, to_iso(knowledge.created_at), knowledge.tag_ids)


def unrelate_all(deps: Dependencies, knowledge: Knowledge) -> None:
    if knowledge.tag_ids:
        deps.tags.unrelate(knowledge.kb_id, knowledge.id, to_iso(knowledge.created_at), knowledge.tag_ids)


def set_tags(deps: Dependencies, knowledge: Knowledge, tag_ids: Sequence[str]) -> Knowledge:
    """Replaces the document's tags (already checked): new relations first, the row, then the old ones go."""
    wanted = list(dict.fromkeys(tag_ids))
    created = to_iso(knowledge.created_at)
    added = [t for t in wanted if t not in knowledge.tag_ids]
    removed = [t for t in knowledge.tag_ids if t not in wanted]
    if added:
        deps.tags.relate(knowledge.kb_id, knowledge.id, created, added)
    updated = deps.knowledge.update_fields(knowledge.id, {"tag_ids": wanted})
    if updated is None:
        raise NotFound(f"knowledge {knowledge.id} not found", code="knowledge_not_found")
    if removed:
        deps.tags.unrelate(knowledge.kb_id, knowledge.id, created, removed)
    return updated


def add_tags(deps: Dependencies, knowledge: Knowledge, tag_ids: Sequence[str]) -> list[str]:
    """Adds only the tags the document does not have yet, while it has fewer than MAX_TAGS_PER_DOCUMENT
    (the bound a request is held to: past it, the document's own tags could not be sent back); returns those."""
    room = max(0, MAX_TAGS_PER_DOCUMENT - len(knowledge.tag_ids))
    added = [t for t in dict.fromkeys(tag_ids) if t not in knowledge.tag_ids][:room]
    if added:
        set_tags(deps, knowledge, [*knowledge.tag_ids, *added])
    return added


def untag(deps: Dependencies, kb_id: str, tag_id: str, knowledge_id: str, created_at: str) -> None:
    """One step of a tag's delete task: off the row (if it has it), then the relation."""
    row = deps.knowledge.get(knowledge_id)
    if row is not None and tag_id in row.tag_ids:
        deps.knowledge.update_fields(knowledge_id, {"tag_ids": [t for t in row.tag_ids if t != tag_id]})
    deps.tags.unrelate(kb_id, knowledge_id, created_at, [tag_id])
