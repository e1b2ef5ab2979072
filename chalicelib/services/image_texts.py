"""The multimodal task's texts of an image (its OCR text, its caption), cached by content per tenant: a reparse,
the same logo on every page of 500 PDFs, or a retried attempt pays the OCR engine or the vision model once.

An entry is one object in the deployment's files store (`storage_keys.image_text_key`) named by the sha256
of the image's bytes and of its recipe: what decides the answer (the engine or model, the prompt, the
languages, the token cap) and this module's FORMAT_VERSION. Never shared across tenants: another tenant's
hit would tell that someone uploaded the same image. Only a text the caller kept is stored (no refusal,
no empty OCR, no failure). The files bucket's lifecycle rule expires the prefix (infra/template.json), so a
tenant's deleted documents leave no cached text behind for longer than that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from chalicelib.domain.storage_keys import image_text_key
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.ports.storage import StorageUnavailable

#: bump when what is stored for the same recipe changes (how a reply is cleaned, what a refusal is)
FORMAT_VERSION = 3
#: a longer text is used but not cached (an OCR text of a poster is a few KB), so a read is bounded
MAX_CACHED_BYTES = 256 * 1024

Recipe = Mapping[str, str | int | list[str]]


def image_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(tenant_id: str, image_sha256: str, kind: str, recipe: Recipe) -> str:
    spelled = json.dumps({"format": FORMAT_VERSION, "kind": kind, **recipe}, sort_keys=True)
    return image_text_key(tenant_id, image_sha256, kind, hashlib.sha256(spelled.encode()).hexdigest())


def cached_text(deps: Dependencies, tenant_id: str, image_sha256: str, kind: str, recipe: Recipe) -> str:
    """The text stored for this image and recipe, or "" (a miss)."""
    url = deps.files.url_for(_key(tenant_id, image_sha256, kind, recipe))
    try:
        data = deps.files.read(url, limit=MAX_CACHED_BYTES)
    except FileNotFoundError:  # never stored, expired (or a store that keeps nothing)
        return ""
    return data.decode("utf-8").strip()


def remember_text(
    deps: Dependencies, tenant_id: str, image_sha256: str, kind: str, recipe: Recipe, text: str
) -> None:
    """Stores a text the caller kept. A store that did not serve the write costs the next reader a model
    call, not this image its text: it is logged and the text is used as it is."""
    data = text.strip().encode("utf-8")
    if not data or len(data) > MAX_CACHED_BYTES:
        return
    try:
        deps.files.save(_key(tenant_id, image_sha256, kind, recipe), data, "text/plain; charset=utf-8")
    except StorageUnavailable as error:
        logger.warning(
            "multimodal: the image text was not cached",
            extra={"tenant_id": tenant_id, "kind": kind, "operation": error.operation},
        )
