"""Tags by name, across knowledge bases: what a move or a clone uses to carry a document's tags into another
knowledge base (WeKnora matches tags by name)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from chalicelib.domain.tags import MAX_TAGS_PER_KB, Tag, TagCapReached, TagNameTaken, name_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.tagging import DELETING, add_tags


def tag_names(deps: Dependencies, knowledge: Knowledge) -> list[str]:
    """The names of the document's tags, in its order (tags being deleted are left out)."""
    by_id = {t.id: t for t in deps.tags.list_kb(knowledge.kb_id) if t.status != DELETING}
    return [by_id[t].name for t in knowledge.tag_ids if t in by_id]


def tag_by_names(deps: Dependencies, knowledge: Knowledge, names: Sequence[str]) -> None:
    """Tags the document (in its own knowledge base) with these names, creating the tags that are missing;
    a name over the knowledge base's cap is skipped. Existing tags of the document are kept."""
    if not names:
        return
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        return
    existing = {name_key(t.name): t for t in deps.tags.list_kb(kb.id)}
    ids: list[str] = []
    for name in dict.fromkeys(n.strip() for n in names if n.strip()):
        tag = existing.get(name_key(name))
        if tag is None:
            tag = Tag(id=str(uuid.uuid4()), tenant_id=kb.tenant_id, kb_id=kb.id, name=name)
            try:
                deps.tags.create(tag, MAX_TAGS_PER_KB)
            except TagCapReached:
                continue
            except TagNameTaken as error:  # created meanwhile by another request
                found = deps.tags.get(kb.id, error.existing_id)
                if found is None:
                    continue
                tag = found
            existing[name_key(name)] = tag
        if tag.status != DELETING:
            ids.append(tag.id)
    current = deps.knowledge.get(knowledge.id)
    if current is not None:
        add_tags(deps, current, ids)
