"""The network: fetched documents, the URL importer, health probes and secrets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class FetchFailed(Exception):
    """A download failed. `permanent` failures (blocked, too large, 4xx) must not be retried. `code`: the
    API's code when the URL (or a redirect's target) was refused, `ssrf_blocked` or `host_unresolved`;
    `file_too_large` when the answer went past the download's size limit; None when a server was asked and
    did not give the document."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status = status
        self.code = code


@dataclass(frozen=True)
class FetchedDocument:
    file_name: str
    file_type: str
    data: bytes
    title: str = ""


class UrlImporter(Protocol):
    """SSRF-safe URL import: the check the handler, the service and the worker run, and the download."""

    def check(self, url: str) -> None:
        """Raises domain BadRequest (code ssrf_blocked) for a URL the server must not reach."""
        ...

    def fetch(self, url: str, *, file_type: str = "", file_name: str = "") -> FetchedDocument:
        """A link to an importable file downloads as that file; a page becomes its main content.
        `file_type` / `file_name`: what the tenant named the download (WeKnora's download mode); a given
        type decides what the document is read as (the parser checks its bytes against it), and only when
        none is given does what the URL serves decide. Raises FetchFailed."""
        ...


class HealthProbe(Protocol):
    def probe(self) -> dict[str, bool]:
        """Does each backing service (table, queues, bucket) answer? Never raises."""
        ...


class SecretSource(Protocol):
    """A secret kept outside the environment (on AWS the operator key, an SSM SecureString)."""

    def read(self) -> str | None:
        """The current value; None while it does not exist (it is created after the stack)."""
        ...
