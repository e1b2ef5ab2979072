"""Resolved chunking settings (WeKnora `ensureDefaults`, with an explicit overlap of 0 honoured)."""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.domain.types import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SEPARATORS,
    ChunkingConfig,
)

HARD_CAP = 7500  # runes: no chunk and no protected unit may exceed this (WeKnora absoluteMaxSize)
CHARS_PER_TOKEN = {"en": 4.0, "de": 4.5, "zh": 1.7, "mixed": 3.0}
STRATEGIES = ("recursive", "heading", "heuristic", "auto")


def chars_for_token_limit(tokens: int, language: str) -> int:
    """Character budget that fits `tokens` with a 10% safety margin (WeKnora CharsForTokenLimit)."""
    if tokens <= 0:
        return 0
    ratio = CHARS_PER_TOKEN.get(language, CHARS_PER_TOKEN["mixed"])
    return int(tokens * ratio * 0.9)


@dataclass(frozen=True)
class Resolved:
    size: int
    overlap: int
    separators: tuple[str, ...]
    strategy: str
    language: str


def resolve(config: ChunkingConfig, *, token_mode: bool = False) -> Resolved:
    """Apply defaults and caps. Only negative overlap means "default": WeKnora's silent 0 -> 80 is a bug."""
    size = config.chunk_size if config.chunk_size > 0 else DEFAULT_CHUNK_SIZE
    overlap = config.chunk_overlap if config.chunk_overlap >= 0 else DEFAULT_CHUNK_OVERLAP
    seps = tuple(s for s in (config.separators or DEFAULT_SEPARATORS) if s) or DEFAULT_SEPARATORS
    lang = config.language if config.language in CHARS_PER_TOKEN else "mixed"
    if config.token_limit > 0:
        # In token mode sizes are already tokens, so the limit applies directly.
        budget = config.token_limit if token_mode else chars_for_token_limit(config.token_limit, lang)
        if 0 < budget < size:
            size = budget
    if not token_mode:
        size = min(size, HARD_CAP)
    overlap = min(overlap, size // 2)
    strategy = (config.strategy or "recursive").lower()
    if strategy == "legacy":
        strategy = "recursive"
    if strategy not in STRATEGIES:
        strategy = "auto"  # WeKnora: unknown values take the profiler path
    return Resolved(size=size, overlap=overlap, separators=seps, strategy=strategy, language=lang)
