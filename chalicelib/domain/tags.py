"""Tags of a knowledge base: names unique per knowledge base (case-insensitively), a cap per knowledge base,
and the knowledge ↔ tag relations that make "the knowledge with this tag" a query rather than a scan."""

from __future__ import annotations

import unicodedata
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.domain.types import utcnow

#: tags one knowledge base may hold (the auto-tagger lists the first 500 to the model)
MAX_TAGS_PER_KB = 500
MAX_TAG_NAME = 100
#: tags one document may have: what a request may set, and where the auto-tagger and tags carried by a
#: move or clone stop adding
MAX_TAGS_PER_DOCUMENT = 100


def name_key(name: str) -> str:
    """What makes two names the same tag: NFKC, case-folded, inner whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


@dataclass
class Tag:
    id: str
    tenant_id: str
    kb_id: str
    name: str
    color: str = ""
    #: "active", or "deleting" while a delete task removes its relations
    status: str = "active"
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["updated_at"] = self.updated_at.isoformat()
        data.pop("tenant_id", None)
        return data


class TagNameTaken(Exception):
    def __init__(self, existing_id: str):
        super().__init__(f"the name is taken by tag {existing_id}")
        self.existing_id = existing_id


class TagCapReached(Exception):
    """The knowledge base already holds MAX_TAGS_PER_KB tags."""
