"""The usage port: what each invocation spent (`UsageEntry`), a big knowledge base's stored reports
(operations/kb_reports.py) kept beside the entries they are summed from (`UsageRepo.report`,
`save_report`), and the paged read a refresh walks them with (`UsageRepo.kb_page`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


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
    #: when it was stored (ISO, UTC): the next refresh waits REFRESH_AFTER_SECONDS from then ('' = as_of)
    stored_at: str = ""


@dataclass(frozen=True)
class UsagePage:
    """One page of a knowledge base's usage entries (`UsageRepo.kb_page`): `cursor` is where the next page
    starts (an opaque string a checkpoint keeps), None after the last page."""

    entries: list[UsageEntry]
    cursor: str | None


@dataclass(frozen=True)
class UsageEntry:
    """What one invocation spent for one knowledge (see `metering`); `entry` is unique per invocation, so
    writing the same entry twice keeps one."""

    knowledge_id: str
    entry: str  # f"{attempt:06d}#{stage}#{invocation}"
    kb_id: str
    tenant_id: str
    counts: Mapping[str, float]
    created_at: str

    @property
    def attempt(self) -> int:
        return int(self.entry.split("#", 1)[0])

    @property
    def stage(self) -> str:
        return self.entry.split("#")[1]


class UsageRepo(Protocol):
    def put(self, entry: UsageEntry) -> None: ...

    def for_knowledge(self, knowledge_id: str) -> list[UsageEntry]: ...

    def for_kb(self, kb_id: str) -> Iterator[UsageEntry]: ...

    def report(self, kb_id: str, kind: str) -> StoredReport | None: ...  # a strongly consistent read

    #: False, nothing written, when a report as new (`as_of`) or newer is stored (a late, older refresh)
    def save_report(self, report: StoredReport) -> bool: ...

    #: the knowledge base's entries a page at a time from `cursor` (None: the first), at most `limit`
    def kb_page(self, kb_id: str, cursor: str | None, limit: int) -> UsagePage: ...

    #: the highest refresh generation of the report known to have ended without storing it; -1 for none
    def ended_generation(self, kb_id: str, kind: str) -> int: ...

    #: keeps `generation` unless a higher one is kept (False then, nothing written)
    def save_ended_generation(self, kb_id: str, kind: str, generation: int) -> bool: ...
