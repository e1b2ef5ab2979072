"""Helpers shared by the remote model adapters."""

from __future__ import annotations

import datetime
import email.utils
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chalicelib.domain.errors import provider_code
from chalicelib.ports import ModelRequestError

__all__ = ["provider_code"]  # the adapters' own name for the domain's rule

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
)


#: the tags reasoning models wrap their thinking in, inside the answer's text
_REASONING_TAG = re.compile(r"<(/?)(think|thinking)>", re.I)


def strip_reasoning(text: str) -> str:
    """The answer without the model's reasoning: every `<think>…</think>` (or `<thinking>`) block; the
    text before a closing tag that comes first (its opening tag was in the server's prompt template); and an
    opened block never closed (the model ran out of tokens while thinking). One pass over the tags."""
    kept: list[str] = []
    pos = 0
    open_tag = ""
    seen = False
    for tag in _REASONING_TAG.finditer(text):
        closing, name = tag.group(1) == "/", tag.group(2).lower()
        if not open_tag and not closing:
            kept.append(text[pos : tag.start()])
            open_tag = name
        elif open_tag and closing and name == open_tag:
            pos, open_tag = tag.end(), ""
        elif not open_tag and closing:
            if seen:  # a stray closing tag; before any other, it ends reasoning the template opened
                kept.append(text[pos : tag.start()])
            pos = tag.end()
        seen = True
    if not seen:
        return text
    if not open_tag:
        kept.append(text[pos:])
    return "".join(kept).strip()


def image_format(image: bytes) -> str:
    """png/jpeg/gif/webp from the magic bytes: the formats both Bedrock and OpenAI-style VLMs accept."""
    for magic, name in _IMAGE_MAGIC:
        if image.startswith(magic):
            return name
    if len(image) >= 12 and image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return "webp"
    raise ModelRequestError("unsupported image format (VLMs take png, jpeg, gif or webp)")


def to_unit_vectors(rows: Sequence[Sequence[float]], expected_dim: int | None, what: str) -> Vectors:
    """Provider floats -> float32 (n, d), L2-normalised; a wrong width is a permanent error."""
    try:
        matrix = np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError) as exc:  # not chained: its text can quote the provider's values
        raise ModelRequestError(
            f"{what}: embeddings are not a numeric matrix ({type(exc).__name__})"
        ) from None
    if matrix.ndim != 2 or (len(rows) and matrix.shape[1] == 0):
        raise ModelRequestError(f"{what}: embeddings have shape {matrix.shape}")
    if expected_dim is not None and len(rows) and matrix.shape[1] != expected_dim:
        raise ModelRequestError(f"{what}: got {matrix.shape[1]} dimensions, expected {expected_dim}")
    if not np.all(np.isfinite(matrix)):
        raise ModelRequestError(f"{what}: embeddings contain NaN or infinity")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.clip(norms, 1e-12, None)).astype(np.float32)


def clip_texts(texts: Sequence[str], max_chars: int) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings, not a string")
    return [t[:max_chars] for t in texts]


def split_system(messages: Sequence[Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """(system texts, [(role, content)] with consecutive same-role turns merged, starting with user)."""
    system: list[str] = []
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = str(message.get("role", "user")).lower()
        content = str(message.get("content", ""))
        if role == "system":
            system.append(content)
            continue
        if role not in ("user", "assistant"):
            raise ModelRequestError(f"unsupported chat role {role!r}")
        if turns and turns[-1][0] == role:
            turns[-1] = (role, turns[-1][1] + "\n\n" + content)
        else:
            turns.append((role, content))
    if not turns:
        # Only a system prompt: send it as the user turn (Converse needs at least one user message).
        turns, system = [("user", "\n\n".join(system))], []
    if turns[0][0] != "user":
        raise ModelRequestError("the first non-system chat message must come from the user")
    return system, turns


def parse_retry_after(headers: Mapping[str, str], *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from `Retry-After` (delta-seconds or HTTP-date) or `retry-after-ms`.

    `headers` keys must be lower-case. Returns None when absent or unparsable; never negative."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # "-0000" zones parse naive; HTTP dates are always GMT
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now())
