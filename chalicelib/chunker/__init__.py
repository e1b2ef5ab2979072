"""WeKnora-grade Markdown chunker.

    split(markdown, config)               -> [ChunkPiece]        flat chunks
    split_parent_child(markdown, config)  -> ParentChildResult   4096-rune parents, 384-rune children
    preview(markdown, config)             -> dict                chunks + tier + profiler/validator figures
    index_text(title, header, content)    -> str                 the text that gets embedded

`max_chunks` bounds what a split may cut: soon past it the split stops and raises TooManyChunks (a piece
over the hard cap is cut whole first), so a refused setting costs what an accepted one does.

Offsets are rune (code point) offsets into `normalise_markdown(text)`. Sizes are runes unless a
`length_function` is given, in which case they are tokens: pass `TokenCounter.from_encoding(tiktoken_enc)`
(fast, segment-cached; reuse it across documents) or any `str -> int` (measured exactly, slower).

One pure-Python implementation: the scans are precompiled regexes and `str.find` over the whole text,
and the merge jumps from chunk end to chunk end with bisects, so Python code runs per chunk, not per rune.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chalicelib.chunker.config import HARD_CAP, Resolved, chars_for_token_limit, resolve
from chalicelib.chunker.lengths import CharMeasure, TokenCounter, TokenMeasure, token_measure
from chalicelib.chunker.spans import find_spans
from chalicelib.chunker.tiers import Chunk4, Ctx, Diagnostics, run_strategy
from chalicelib.domain.chunk_limits import NO_LIMIT, TooManyChunks
from chalicelib.domain.types import ChunkingConfig

__all__ = [
    "HARD_CAP",
    "ChildPiece",
    "ChunkPiece",
    "ChunkingConfig",
    "ParentChildResult",
    "TokenCounter",
    "TooManyChunks",
    "chars_for_token_limit",
    "index_text",
    "normalise_markdown",
    "preview",
    "split",
    "split_parent_child",
]

LengthFunction = TokenCounter | Callable[[str], int] | None


@dataclass(slots=True)  # slots: many thousands per document; cheaper to build, hold and collect
class ChunkPiece:
    seq: int
    content: str
    start: int  # rune offsets into the normalised markdown
    end: int
    context_header: str = ""  # heading breadcrumb ("# A\n## B"); never part of content
    header_prefix_len: int = 0  # runes of synthetic repeated table header at the head of content

    @property
    def source_text(self) -> str:
        """Content without the synthetic table header, i.e. markdown[start:end]."""
        return self.content[self.header_prefix_len :]


@dataclass(slots=True)
class ChildPiece:
    piece: ChunkPiece
    parent_index: int  # index into ParentChildResult.parents, -1 when the parent was dropped


@dataclass
class ParentChildResult:
    parents: list[ChunkPiece] = field(default_factory=list)
    children: list[ChildPiece] = field(default_factory=list)


def normalise_markdown(text: str) -> str:
    """The text all offsets refer to: CRLF and lone CR become LF, a leading BOM is dropped."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def index_text(title: str, context_header: str, content: str) -> str:
    """Embedding input (WeKnora processChunks): title, breadcrumb, trimmed content."""
    body = content.strip()
    if context_header:
        body = context_header + "\n\n" + body
    return title + "\n" + body


def _measure(text: str, length_function: LengthFunction) -> CharMeasure | TokenMeasure:
    if length_function is None:
        return CharMeasure(text)
    if isinstance(length_function, TokenCounter):
        counter = length_function
    else:
        # Nothing is known about a bare function (special tokens, byte fallback...): measure exactly.
        counter = TokenCounter(length_function, additive=False, max_bytes_per_token=0)
    return token_measure(text, counter)


def _pieces(text: str, chunks: list[Chunk4]) -> list[ChunkPiece]:
    return [
        ChunkPiece(
            seq=i,
            content=h + text[s:e] if h else text[s:e],
            start=s,
            end=e,
            context_header=ctx,
            header_prefix_len=len(h),
        )
        for i, (s, e, h, ctx) in enumerate(chunks)
    ]


def _run(
    markdown: str, config: ChunkingConfig, length_function: LengthFunction, max_chunks: int
) -> tuple[list[Chunk4], Diagnostics, Resolved]:
    m = _measure(markdown, length_function)
    cfg = resolve(config, token_mode=m.token_mode)
    if not markdown:
        return [], Diagnostics(tier_chain=[]), cfg
    ctx = Ctx(markdown, find_spans(markdown), cfg, m)
    chunks, diag = run_strategy(ctx, 0, len(markdown), max_chunks)
    return chunks, diag, cfg


def split(
    markdown: str,
    config: ChunkingConfig,
    *,
    length_function: LengthFunction = None,
    max_chunks: int = NO_LIMIT,
) -> list[ChunkPiece]:
    """Chunk already-normalised Markdown with the configured strategy."""
    return _pieces(markdown, _run(markdown, config, length_function, max_chunks)[0])


def _heading_level(breadcrumb_line: str) -> int:
    return len(breadcrumb_line) - len(breadcrumb_line.lstrip("#"))


def _merge_breadcrumbs(parent: str, child: str) -> str:
    """A child's path: the parent's path above the child's shallowest heading, then the child's own (its
    headings were seen from the parent's start). The child's first line is its shallowest level, and a
    heading replaces every heading at its level or deeper: so the path is what the document's headings
    give at the child, as in flat mode."""
    if not parent:
        return child
    if not child:
        return parent
    level = _heading_level(child.split("\n", 1)[0])
    kept = [line for line in parent.split("\n") if _heading_level(line) < level]
    return "\n".join([*kept, child])


def split_parent_child(
    markdown: str,
    config: ChunkingConfig,
    *,
    length_function: LengthFunction = None,
    max_chunks: int = NO_LIMIT,
) -> ParentChildResult:
    """Two-level chunking: parents keep context, children are embedded. token_limit only caps children;
    a parent whose only child is identical to it is dropped (the child gets parent_index -1). `max_chunks`
    bounds the kept parents and the children together."""
    return _parent_child(markdown, config, length_function, max_chunks)[0]


def _parent_child(
    markdown: str, config: ChunkingConfig, length_function: LengthFunction, max_chunks: int
) -> tuple[ParentChildResult, Diagnostics, Resolved]:
    m = _measure(markdown, length_function)
    parent_cfg = dataclasses.replace(
        config, chunk_size=config.parent_chunk_size if config.parent_chunk_size > 0 else 4096, token_limit=0
    )
    child_size = config.child_chunk_size if config.child_chunk_size > 0 else 384
    child_cfg = dataclasses.replace(config, chunk_size=child_size, chunk_overlap=child_size // 5)
    child_res = resolve(child_cfg, token_mode=m.token_mode)
    if not markdown:
        return ParentChildResult(), Diagnostics(tier_chain=[]), child_res
    spans = find_spans(markdown)
    pctx = Ctx(markdown, spans, resolve(parent_cfg, token_mode=m.token_mode), m)
    cctx = Ctx(markdown, spans, child_res, m)
    # every parent has a child at least: more parents than max_chunks is more chunks too
    parents_raw, diag = run_strategy(pctx, 0, len(markdown), max_chunks)
    kept: list[Chunk4] = []
    children: list[Chunk4] = []
    parent_of: list[int] = []
    for ps, pe, ph, pcrumb in parents_raw:
        # A parent inside a long table starts with its repeated header: so do its children's split.
        room = max_chunks - len(kept) - len(children)
        subs = run_strategy(
            dataclasses.replace(cctx, lead_at=ps, lead_header=ph) if ph else cctx, ps, pe, room
        )[0]
        index = -1
        if len(subs) > 1 or (
            len(subs) == 1 and (subs[0][2] + markdown[subs[0][0] : subs[0][1]]) != ph + markdown[ps:pe]
        ):
            index = len(kept)
            kept.append((ps, pe, ph, pcrumb))
        if pcrumb:
            children.extend((s, e, h, _merge_breadcrumbs(pcrumb, crumb)) for s, e, h, crumb in subs)
        else:
            children.extend(subs)
        parent_of.extend([index] * len(subs))
        if len(kept) + len(children) > max_chunks:
            raise TooManyChunks(f"more than {max_chunks} chunks")
    result = ParentChildResult(parents=_pieces(markdown, kept))
    pieces = _pieces(markdown, children)
    result.children = [ChildPiece(piece=p, parent_index=i) for p, i in zip(pieces, parent_of, strict=True)]
    return result, diag, child_res


def _chunk_json(p: ChunkPiece, parent_index: int | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "seq": p.seq,
        "content": p.content,
        "start": p.start,
        "end": p.end,
        "context_header": p.context_header,
        "header_prefix_len": p.header_prefix_len,
        "runes": len(p.content),
    }
    if parent_index is not None:
        d["parent_index"] = parent_index
    return d


def preview(
    markdown: str,
    config: ChunkingConfig,
    limit: int = 500,
    *,
    length_function: LengthFunction = None,
    max_chunks: int = NO_LIMIT,
    max_stored: int = NO_LIMIT,
) -> dict[str, Any]:
    """What the chunk-preview endpoint returns: the tier that won, why others lost, the profile, and at
    most `limit` chunks (`total_chunks` counts them all). With enable_parent_child the chunks are the
    children (each with parent_index) and the parents are listed too; tier diagnostics describe the parent
    split (as in WeKnora), the effective sizes the children. Past `max_chunks` pieces cut, or `max_stored`
    chunks that would be stored (not blank; with parent-child, the parents kept and the children), it raises
    TooManyChunks."""
    limit = max(0, limit)
    extra: dict[str, Any] = {}
    if config.enable_parent_child:
        pc, diag, cfg = _parent_child(markdown, config, length_function, max_chunks)
        chunks = [_chunk_json(c.piece, c.parent_index) for c in pc.children[:limit]]
        total = len(pc.children)
        stored = sum(1 for c in pc.children if c.piece.content.strip()) + sum(
            1 for p in pc.parents if p.content.strip()
        )
        extra = {"parents": [_chunk_json(p) for p in pc.parents[:limit]], "total_parents": len(pc.parents)}
    else:
        raw, diag, cfg = _run(markdown, config, length_function, max_chunks)
        chunks = [_chunk_json(p) for p in _pieces(markdown, raw[:limit])]  # only the shown ones' text
        total = len(raw)
        stored = sum(1 for s, e, h, _ in raw if h.strip() or (not markdown[s:e].isspace() and s < e))
    if stored > max_stored:
        raise TooManyChunks(f"more than {max_stored} chunks")
    return {
        "strategy_used": cfg.strategy,
        "tier": diag.selected_tier,
        "diagnostics": {
            "selected_tier": diag.selected_tier,
            "tier_chain": diag.tier_chain,
            "rejected": diag.rejected,
            "profile": diag.profile,
            "effective_chunk_size": cfg.size,
            "effective_chunk_overlap": cfg.overlap,
            "size_unit": "tokens" if length_function is not None else "runes",
            "protected_spans": len(find_spans(markdown).starts) if markdown else 0,
        },
        "chunks": chunks,
        "total_chunks": total,
        **extra,
    }
