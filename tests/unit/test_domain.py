"""Pure domain rules: the importable-extension gate, safe keys, process-config merge, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chalicelib.commands import ProcessConfig, validate
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.filetypes import IMPORTABLE_EXTENSIONS, validate_import_file_type
from chalicelib.domain.process_config import check_media_gates, resolve
from chalicelib.domain.storage_keys import folder_of, safe_file_name, safe_object_key, source_object_key
from chalicelib.domain.types import ChunkingConfig, KnowledgeBase
from chalicelib.enrich.extractive import summarize


def test_the_specification_lists_25_importable_extensions() -> None:
    assert len(IMPORTABLE_EXTENSIONS) == 25
    assert validate_import_file_type("Report.PDF") == "pdf"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("clip.mp4", "video_not_supported"),
        ("a.MOV", "video_not_supported"),
        ("tool.exe", "unsupported_file_type"),
        ("README", "unsupported_file_type"),
        ("x.docm", "unsupported_file_type"),
    ],
)
def test_rejected_extensions_have_stable_codes(name: str, code: str) -> None:
    with pytest.raises(BadRequest) as error:
        validate_import_file_type(name)
    assert error.value.code == code


@pytest.mark.parametrize("key", ["../etc/passwd", "a/../../b", "/abs/key", "a/./b", "a\x00b"])
def test_unsafe_object_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError):
        safe_object_key(key)


def test_file_names_are_made_safe_and_keys_never_carry_them() -> None:
    assert safe_file_name("../../secret/..\\evil:name?.md") == "evil_name_.md"
    assert (
        safe_file_name("x" * 300 + ".pdf").endswith(".pdf") and len(safe_file_name("x" * 300 + ".pdf")) == 255
    )
    assert folder_of("docs/2024/../q1/report.pdf") == "docs/2024/q1"
    key = source_object_key("t1", "k1", "pdf")
    assert key.startswith("t1/k1/") and key.endswith(".pdf") and len(key.split("/")[-1]) == 36


def test_overrides_merge_over_the_kb_and_explicit_zero_overlap_is_kept() -> None:
    kb = KnowledgeBase("kb", "t", "n", chunking_config=ChunkingConfig(chunk_size=800, chunk_overlap=100))
    effective = resolve(kb, {"chunking": {"chunk_overlap": 0, "chunk_size": 0, "enable_parent_child": True}})
    assert effective.chunking.chunk_overlap == 0  # WeKnora turns 0 into 80; we do not
    assert effective.chunking.chunk_size == 800  # a zero size means "keep the KB's"
    assert effective.chunking.enable_parent_child is True


@pytest.mark.parametrize(
    "raw",
    [
        "not a dict",
        {"unknown": 1},
        {"chunking": {"chunk_size": 99999}},
        {"chunking": {"chunk_overlap": -1}},
        {"parser_engine_rules": {"pdf": 3}},
        {"chunking": {"separators": 5}},
        {"chunking": {"separators": [None, 5]}},
        {"chunking": {"parent_chunk_size": "x"}},
        {"chunking": {"strategy": "abc"}},
        {"enable_multimodel": "yes"},
    ],
)
def test_invalid_process_config_is_a_400(raw: object) -> None:
    with pytest.raises(BadRequest) as error:
        validate(ProcessConfig, raw)
    assert error.value.code == "invalid_body"


def test_images_need_vlm_or_ocr_and_audio_needs_asr() -> None:
    kb = KnowledgeBase("kb", "t", "n")
    with pytest.raises(BadRequest, match="vision model"):
        check_media_gates("png", resolve(kb, {}), ocr_available=False, asr_available=True)
    check_media_gates("png", resolve(kb, {}), ocr_available=True, asr_available=False)
    with pytest.raises(BadRequest, match="speech"):
        check_media_gates("mp3", resolve(kb, {}), ocr_available=True, asr_available=False)
    check_media_gates(
        "mp3", resolve(kb, {"asr_model_id": "bedrock/transcribe"}), ocr_available=False, asr_available=False
    )


def test_timestamps_sort_like_step_functions_entered_time() -> None:
    stamp = to_iso(from_iso("2026-11-30T02:40:00.123456+00:00"))
    assert stamp == "2026-11-30T02:40:00.123Z"
    assert from_iso(stamp).microsecond == 123000


def test_timestamps_of_any_year_sort_as_their_times() -> None:
    """A listing filter of `created_to=0999-01-01` compared against `999-…` had listed every document."""
    early, now = datetime(999, 1, 1, tzinfo=UTC), datetime(2026, 12, 6, tzinfo=UTC)
    assert to_iso(early) == "0999-01-01T00:00:00.000Z" and to_iso(early) < to_iso(now)
    assert to_iso(datetime(5, 6, 7, 8, 9, 10, 999999, tzinfo=UTC)) == "0005-06-07T08:09:10.999Z"


def test_extractive_summary_keeps_central_sentences_within_the_cap() -> None:
    text = " ".join(
        ["Debian is a free operating system built by volunteers."] * 2
        + [
            "The Debian project maintains thousands of packages for the operating system.",
            "Packages are installed with apt, the Debian package manager.",
            "Unrelated trivia: the weather was nice.",
        ]
    )
    summary = summarize(text, max_sentences=2, max_chars=300)
    assert "Debian" in summary and len(summary) <= 300
    assert "weather" not in summary


def test_long_documents_are_sampled_head_middle_tail() -> None:
    from chalicelib.enrich.summary import sample

    text = "H" * 30_000 + "M" * 30_000 + "T" * 30_000
    sampled = sample(text, 1000)
    assert len(sampled) <= 1000 and sampled.startswith("H") and sampled.endswith("T") and "M" in sampled


def test_a_chat_model_summary_uses_the_weknora_prompt() -> None:
    from chalicelib.enrich.summary import summarize as summarize_with

    class FakeChat:  # a remote chat model cannot run here
        model_id = "fake/chat"

        def __init__(self) -> None:
            self.messages: list[dict[str, str]] = []

        def chat(
            self, messages: list[dict[str, str]], *, temperature: float = 0.3, max_tokens: int = 2048
        ) -> str:
            self.messages = messages
            return " A short summary. "

    chat = FakeChat()
    assert summarize_with(["Tides follow the moon."], "openai/gpt", chat, "tides.md") == "A short summary."
    assert "100 to 500 words" in chat.messages[0]["content"] and "tides.md" in chat.messages[1]["content"]
    with pytest.raises(ValueError):
        summarize_with(["  ", "!!"], "local/extractive", None)


def test_file_names_lose_bidi_controls_and_folders_lose_markup() -> None:
    """Regression (issue 9): `evil\u202egpj.exe` kept its right-to-left override (shown as `evilexe.jpg`),
    and folder paths kept markup."""
    assert safe_file_name("evil\u202egpj.exe") == "evilgpj.exe"
    assert safe_file_name("a\u2066b\u2069.pdf") == "ab.pdf"
    assert folder_of('<img src=x onerror="y">/docs/a.pdf') == "_img src=x onerror=_y__/docs"
    assert folder_of("team/\u202ereports/a.pdf") == "team/reports"


def test_file_names_lose_c1_controls_as_c0_ones() -> None:
    """U+009B is a terminal's CSI as ESC [ is: a file name is shown in the CLI and the console."""
    assert safe_file_name("a\x9b2Jb\x85.txt") == "a_2Jb_.txt"


def test_credentials_in_urls_are_never_shown() -> None:
    from chalicelib.domain.types import Knowledge, KnowledgeType
    from chalicelib.domain.urls import redact_credentials

    assert redact_credentials("https://bob:hunter2@files.example/a.pdf") == "https://***@files.example/a.pdf"
    assert redact_credentials("https://files.example:8443/a") == "https://files.example:8443/a"
    row = Knowledge("k", "t", "kb", KnowledgeType.FILE_URL, source="https://bob:hunter2@x.example/a.pdf")
    shown = row.to_dict()
    assert "hunter2" not in str(shown) and "file_path" not in shown and "dedupe_key" not in shown
