"""Helpers shared by the remote model adapters."""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from chalicelib.domain.errors import provider_code
from chalicelib.domain.image_limits import MAX_IMAGE_PIXELS
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


def _accepted_format(image: bytes) -> str | None:
    for magic, name in _IMAGE_MAGIC:
        if image.startswith(magic):
            return name
    if len(image) >= 12 and image[:4] == b"RIFF" and image[8:12] == b"WEBP":
        return "webp"
    return None


#: what every VLM we call takes: Bedrock refuses an image over 3.75 MB or 8,000 px a side (and OpenAI a GIF
#: that moves); a bigger one is scaled down, not refused
VISION_MAX_BYTES = 3_750_000
VISION_MAX_SIDE = 8_000
#: a larger image is scaled to this long side: more than the VLMs look at (they resize to ~1,600-2,048)
VISION_SCALED_SIDE = 4_096
_PLAIN_MODES = {"png": {"1", "L", "LA", "P", "RGB", "RGBA"}, "jpeg": {"L", "RGB"}}


def vision_image(image: bytes) -> tuple[bytes, str]:
    """(bytes, format) a VLM accepts: the image as it is when it is already one (png/jpeg/gif/webp, one frame,
    8-bit, within the size caps), else its first frame re-encoded (BMP, TIFF, CMYK or 16-bit, animated,
    too large) as PNG, or JPEG when that is still too large. ModelRequestError for bytes no VLM would read
    (not an image, or more pixels than MAX_IMAGE_PIXELS); a retry would read them the same way."""
    import io
    import warnings

    from PIL import Image, ImageOps, UnidentifiedImageError

    fmt = _accepted_format(image)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(image)) as img:
                width, height = img.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise ModelRequestError(
                        f"the image has {width} x {height} pixels, more than {MAX_IMAGE_PIXELS:,} a VLM is sent"
                    )
                plain = (
                    fmt is not None
                    and len(image) <= VISION_MAX_BYTES
                    and max(width, height) <= VISION_MAX_SIDE
                    and getattr(img, "n_frames", 1) == 1
                    and (fmt not in _PLAIN_MODES or img.mode in _PLAIN_MODES[fmt])
                )
                if plain and fmt is not None:
                    return image, fmt
                img.seek(0)
                upright = ImageOps.exif_transpose(img) or img  # a photo's orientation goes with its EXIF
                if upright.mode.startswith("I") or upright.mode == "F":  # 16-bit or wider grey: to 8 bits
                    upright = upright.convert("I").point(lambda v: v * (1 / 256)).convert("L")
                frame = upright.convert("RGBA" if img.mode in ("RGBA", "LA", "PA", "P") else "RGB")
    except ModelRequestError:  # a ValueError too: not the decoder's
        raise
    except (UnidentifiedImageError, SyntaxError, ValueError, OSError, Image.DecompressionBombError) as exc:
        if fmt is not None and not isinstance(exc, Image.DecompressionBombError):
            return image, fmt  # Pillow cannot read it: the model decides (and its refusal fails the image)
        raise ModelRequestError(f"the image cannot be decoded ({type(exc).__name__})") from None
    return _encoded_within_caps(frame)


def _encoded_within_caps(frame: Any) -> tuple[bytes, str]:
    import io

    from PIL import Image

    if max(frame.size) > VISION_MAX_SIDE or frame.width * frame.height > VISION_SCALED_SIDE**2:
        frame.thumbnail((VISION_SCALED_SIDE, VISION_SCALED_SIDE))
    out = io.BytesIO()
    frame.save(out, format="PNG", optimize=False)
    if out.tell() <= VISION_MAX_BYTES:
        return out.getvalue(), "png"
    if frame.mode == "RGBA":  # JPEG has no alpha: flattened on white, as a page would show it
        background = Image.new("RGB", frame.size, (255, 255, 255))
        background.paste(frame, mask=frame.getchannel("A"))
        frame = background
    while True:
        out = io.BytesIO()
        frame.save(out, format="JPEG", quality=85)
        if out.tell() <= VISION_MAX_BYTES or max(frame.size) <= 256:
            return out.getvalue(), "jpeg"
        frame = frame.resize((max(1, frame.width // 2), max(1, frame.height // 2)))


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


#: the longest wait a provider's Retry-After is taken at (a day): the value reaches the API's JSON
#: (`details.retry_after`) and the stages' waits, so it is a finite number of seconds
MAX_RETRY_AFTER_SECONDS = 86_400.0


def _wait(seconds: float) -> float | None:
    """`seconds` within [0, MAX_RETRY_AFTER_SECONDS] (`inf`, `1e999` included); None for NaN."""
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SECONDS)


def parse_retry_after(headers: Mapping[str, str], *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait from `Retry-After` (delta-seconds or HTTP-date) or `retry-after-ms`.

    `headers` keys must be lower-case. Returns None when absent or unparsable; never negative, never more
    than MAX_RETRY_AFTER_SECONDS."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            waited = _wait(float(raw_ms) / 1000.0)
        except ValueError:
            waited = None
        if waited is not None:
            return waited
    raw = (headers.get("retry-after") or "").strip()
    if not raw:
        return None
    try:
        return _wait(float(raw))
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
    return _wait(when.timestamp() - now())
