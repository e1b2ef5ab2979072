"""Object keys and file names that are safe on every backend (no traversal, no control characters)."""

from __future__ import annotations

import hashlib
import posixpath
import re
import unicodedata
import uuid

_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f-\x9f/\\:*?\"<>|]")  # C1 too: U+009B is a terminal's CSI
#: bidirectional overrides and isolates make `evil\u202egpj.exe` display as `evilexe.jpg`
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: C0 controls, DEL and C1 controls: in a name or a title they would reach terminals (the CLI, logs read
#: there) as escape sequences, written by whoever named the thing (a shared knowledge base: another tenant);
#: the line and paragraph separators break the line, and bidirectional overrides and isolates make
#: `invoice\u202efdp.exe` display as `invoiceexe.pdf`. A title must not hold them (commands), a file name
#: loses them (safe_file_name)
NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_NAME = 255
#: a title's length (commands: EditKnowledgeRequest, the create requests)
MAX_TITLE = 500


def one_line(text: str) -> str:
    """Text the tenant or a remote server wrote (a text's first line, a URL, a file name, a page's <title>)
    as a title: one line of printable text (bidirectional controls gone, each other NOT_ONE_LINE character a
    space, spaces collapsed), at most
    MAX_TITLE characters, as a title sent must be."""
    return " ".join(NOT_ONE_LINE.sub(" ", _BIDI_CONTROLS.sub("", text)).split())[:MAX_TITLE]


def safe_file_name(name: str) -> str:
    """A display-safe base name: no directories, no control characters, at most 255 characters."""
    name = _BIDI_CONTROLS.sub("", unicodedata.normalize("NFC", name.replace("\\", "/")))
    base = _UNSAFE_NAME.sub("_", posixpath.basename(name).strip().strip("."))
    # one line, like a title: what is left of NOT_ONE_LINE (the line and paragraph separators) goes, and the
    # ends it uncovered are cleaned again
    base = NOT_ONE_LINE.sub("", base).strip().strip(".")
    if len(base) > MAX_NAME:
        stem, ext = posixpath.splitext(base)
        base = stem[: MAX_NAME - len(ext)] + ext
    return base or "unnamed"


def folder_of(name: str) -> str:
    """WeKnora keeps the directory part of an uploaded `fileName` as the knowledge's folder path; each
    folder is cleaned like a file name (no markup, control or bidi characters)."""
    parts = [p for p in name.replace("\\", "/").split("/")[:-1] if p.strip() not in ("", ".", "..")]
    return "/".join(safe_file_name(p) for p in parts)


def safe_object_key(key: str) -> str:
    parts = key.replace("\\", "/").split("/")
    if any(part in ("..", ".") for part in parts) or key.startswith("/"):
        raise ValueError(f"unsafe object key: {key!r}")
    if _CONTROL.search(key):
        raise ValueError(f"unsafe object key: {key!r}")
    return "/".join(p for p in parts if p)


def source_object_key(tenant_id: str, knowledge_id: str, file_type: str) -> str:
    """`{tenant}/{knowledge}/{uuid}{ext}`: the stored name never carries the user's file name."""
    ext = f".{file_type}" if file_type else ""
    return f"{tenant_id}/{knowledge_id}/{uuid.uuid4().hex}{ext}"


def parsed_markdown_key(tenant_id: str, knowledge_id: str, attempt: int) -> str:
    return f"{tenant_id}/{knowledge_id}/parsed/attempt-{attempt}.md"


def download_copy_key(tenant_id: str, knowledge_id: str, kind: str, attempt: int) -> str:
    """Where a download link's copy lives when the documents' store cannot sign links (`local://`): in the
    files bucket, one key per file, so a second link rewrites the same copy."""
    return f"downloads/{tenant_id}/{knowledge_id}/{kind}-{attempt}"


def image_copy_key(tenant_id: str, knowledge_id: str, url: str) -> str:
    """Where a search hit's image link is served from when the documents' store cannot sign links
    (`local://`): in the files bucket beside the download copies, one key per stored image."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    ext = posixpath.splitext(url)[1].lower()
    if not re.fullmatch(r"\.[a-z0-9]{1,8}", ext):
        ext = ""
    return f"downloads/{tenant_id}/{knowledge_id}/image-{digest}{ext}"


def exports_key(tenant_id: str, knowledge_id: str, attempt: int, data: bytes, ext: str) -> str:
    """An image the parse stored: named by its document, attempt and bytes, so a retried parse writes the
    same object again instead of leaving the first try's under a name no manifest lists."""
    ext = ext if ext.startswith(".") or not ext else f".{ext}"
    digest = hashlib.sha256(f"{knowledge_id}/{attempt}/".encode() + data).hexdigest()[:32]
    return f"{tenant_id}/exports/{digest}{ext}"


#: the multimodal task's cached image texts (services/image_texts): one top-level prefix, so the files bucket's
#: lifecycle rule expires them and the task's role may write only there
IMAGE_TEXTS_PREFIX = "image-texts/"


def image_text_key(tenant_id: str, image_sha256: str, kind: str, recipe_sha256: str) -> str:
    """An image's OCR text or caption, cached per tenant: named by the image's bytes and by the digest of
    what decides the answer (engine or model, prompt, format version), never by a document or a prompt."""
    return f"{IMAGE_TEXTS_PREFIX}{tenant_id}/{image_sha256}/{kind}-{recipe_sha256}.txt"


def page_range_key(tenant_id: str, knowledge_id: str, attempt: int, part: str) -> str:
    """A large PDF parsed in page ranges: the plan (`plan.json`) and each range's Markdown and images
    (`pages-000100.md`, `pages-000100.images.json`), beside the attempt's Markdown (cleaned up with it)."""
    return f"{tenant_id}/{knowledge_id}/parsed/attempt-{attempt}.ranges/{part}"


def images_manifest_key(tenant_id: str, knowledge_id: str, attempt: int) -> str:
    """The stored images of one parse attempt (JSON), beside its Markdown."""
    return f"{tenant_id}/{knowledge_id}/parsed/attempt-{attempt}.images.json"


def upload_intent_key(knowledge_id: str) -> str:
    """What a presigned upload promised (tenant, KB, settings), kept until its object arrives."""
    return f"intents/{knowledge_id}.json"


def upload_result_key(knowledge_id: str) -> str:
    """Why an accepted presigned upload was rejected when its object arrived."""
    return f"intents/{knowledge_id}.result.json"


def presigned_upload_key(prefix: str, tenant_id: str, kb_id: str, knowledge_id: str, file_name: str) -> str:
    return f"{prefix}{tenant_id}/{kb_id}/{knowledge_id}/{safe_file_name(file_name)}"


#: what the docreader function reports it can parse (written by the docreader, read by the API)
PARSER_ENGINES_REPORT_KEY = "meta/parser-engines.json"
