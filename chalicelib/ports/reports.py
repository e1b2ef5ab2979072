"""A big knowledge base's stored reports (operations/kb_reports.py), kept by the usage port beside the
entries they are summed from (`UsageRepo.report`, `save_report`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoredReport:
    """A knowledge base's report (`cost`, `stats`) as its last refresh computed it from every entry or row:
    what a request answers when the knowledge base is too big to read inline."""

    kb_id: str
    kind: str
    #: when the refresh began reading (ISO, UTC): a report replaces only an older one
    as_of: str
    #: the generation of the refresh task that wrote it (the next refresh is the one after it)
    generation: int
    body: Mapping[str, Any]
