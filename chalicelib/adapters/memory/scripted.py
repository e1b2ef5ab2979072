"""Scripted stand-ins: a URL importer that answers from a script, a sleep that returns at once."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.domain.errors import BadRequest
from chalicelib.domain.filetypes import file_type_of
from chalicelib.ports import (
    FetchedDocument,
    FetchFailed,
)

if TYPE_CHECKING:
    pass


Scripted = FetchedDocument | FetchFailed


class ScriptedUrlImporter:
    """Answers each URL from a script: a document, a FetchFailed, or a list of those consumed in order
    (the last one repeats). `blocked` URLs fail the SSRF check with the real adapter's code."""

    def __init__(
        self, script: Mapping[str, Scripted | Sequence[Scripted]] | None = None, blocked: Iterable[str] = ()
    ) -> None:
        self.script: dict[str, list[Scripted]] = {}
        for url, answer in (script or {}).items():
            self.answer(url, answer)
        self.blocked = set(blocked)
        self.checked: list[str] = []
        self.fetched: list[str] = []
        self._lock = threading.Lock()

    def answer(self, url: str, answer: Scripted | Sequence[Scripted]) -> None:
        self.script[url] = list(answer) if isinstance(answer, Sequence) else [answer]

    def check(self, url: str) -> None:
        self.checked.append(url)
        if url in self.blocked:
            raise BadRequest("URL rejected: the address is not allowed", code="ssrf_blocked")

    def fetch(self, url: str, *, file_type: str = "", file_name: str = "") -> FetchedDocument:
        with self._lock:
            self.fetched.append(url)
            answers = self.script.get(url)
            if not answers:
                raise FetchFailed(f"HTTP 404 for {url}", permanent=True, status=404)
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, FetchFailed):
            raise answer
        named_type = (file_type or file_type_of(file_name)).lower().lstrip(".")
        if named_type:  # as the real importer: the type the tenant gave decides, the bytes are the server's
            return replace(answer, file_type=named_type, file_name=file_name or answer.file_name, title="")
        return answer


class InstantSleep:
    """A sleeper that records the waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# ---------------------------------------------------------------- the whole set
