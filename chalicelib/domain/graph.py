"""The knowledge graph's one naming rule: how an entity is keyed, so "Acme  Corp" and "acme corp" meet."""

from __future__ import annotations

import re
import unicodedata


def entity_key(name: str) -> str:
    """NFKC, case-folded, single spaces."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", name)).strip().casefold()
