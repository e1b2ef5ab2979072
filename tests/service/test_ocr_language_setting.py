"""The `ocr_languages` / `asr_language` settings (issue 13) on the fakes: the upload's value beats the
knowledge base's, reaches the OCR engine that reads an uploaded image, and a value outside the allow-list
is a 400 with a stable code before anything is stored."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest
from PIL import Image

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ProcessConfig
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.operations.knowledge_bases import create_kb

from .conftest import drain


class LanguageOcr:
    """An OCR engine that says which languages it was set to read with."""

    name = "language-ocr"

    def __init__(self, languages: Sequence[str] = (), log: list[tuple[str, ...]] | None = None) -> None:
        self.languages = tuple(languages)
        self.log: list[tuple[str, ...]] = [] if log is None else log

    def available(self) -> bool:
        return True

    def with_languages(self, languages: Sequence[str]) -> LanguageOcr:
        return LanguageOcr(languages, self.log)

    def recognize(self, image: bytes) -> str:
        self.log.append(self.languages)
        return f"read with {'+'.join(self.languages) or 'detected languages'}"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (120, 80), (255, 255, 255)).save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("kb_languages", "upload_languages", "read_with"),
    [
        ([], None, ()),  # neither: the engine detects per page
        (["kor"], None, ("kor",)),
        (["kor"], ["jpn", "eng"], ("jpn", "eng")),  # the upload's setting wins
    ],
)
def test_the_setting_reaches_the_engine_reading_an_uploaded_image(
    deps: Services,
    tenant: Tenant,
    kb_languages: list[str],
    upload_languages: list[str] | None,
    read_with: tuple[str, ...],
) -> None:
    engine = LanguageOcr()
    deps.replace_ocr_asr(engine, None)
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="scans", ocr_languages=kb_languages))
    overrides = ProcessConfig(ocr_languages=upload_languages).overrides()
    created = create_from_file(
        deps, tenant.id, kb.id, FileUpload(data=_png(), file_name="page.png", overrides=overrides)
    )
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status != ParseStatus.FAILED, row
    assert engine.log == [read_with]


@pytest.mark.parametrize(
    ("kb_settings", "overrides", "code"),
    [
        ({"ocr_languages": ["klingon"]}, None, "invalid_ocr_languages"),
        ({}, {"ocr_languages": ["eng", "jp"]}, "invalid_ocr_languages"),
        ({"asr_language": "english"}, None, "invalid_asr_language"),
        ({}, {"asr_language": "xx"}, "invalid_asr_language"),
    ],
)
def test_a_language_outside_the_allow_list_is_a_400_with_a_stable_code(
    deps: Services,
    tenant: Tenant,
    kb_settings: dict[str, object],
    overrides: dict[str, object] | None,
    code: str,
) -> None:
    with pytest.raises(BadRequest) as caught:
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase.model_validate({"name": "langs", **kb_settings}))
        create_from_file(
            deps,
            tenant.id,
            kb.id,
            FileUpload(data=b"# A\n\ntext", file_name="a.md", overrides=overrides or {}),
        )
    assert caught.value.code == code
    assert deps.kbs.by_name(tenant.id, "langs") is None or overrides is not None
