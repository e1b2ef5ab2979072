"""OCR and ASR engines. tesseract, rapidocr and faster-whisper run for real on corpus files; Textract is a
remote service we cannot run here, so it is driven through botocore's Stubber (Transcribe: test_transcribe.py)."""

import io
import re
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from parser_helpers import corpus_bytes
from PIL import Image

from chalicelib.domain.errors import PermanentStageError, TransientStageError
from chalicelib.parsers import build_docreader
from chalicelib.parsers import ocr as ocr_module
from chalicelib.parsers.asr import WhisperAsr, assemble_whisper_model
from chalicelib.parsers.ocr import RapidOcr, TesseractOcr, TextractOcr, clean_ocr_text
from chalicelib.ports import ReadRequest


def cer(hypothesis: str, truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    h = re.sub(r"\s+", " ", hypothesis).strip()
    t = re.sub(r"\s+", " ", truth).strip()
    return Levenshtein.distance(h, t) / max(len(t), 1)


def wer(hypothesis: str, truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    h = re.findall(r"[a-z0-9']+", hypothesis.lower())
    t = re.findall(r"[a-z0-9']+", truth.lower())
    return Levenshtein.distance(h, t) / max(len(t), 1)


tesseract = TesseractOcr(("eng",))


@pytest.mark.requires_tesseract
def test_tesseract_reads_clean_page(corpus: Path) -> None:
    text = tesseract.recognize(corpus_bytes("debian-reference-p40.png"))
    truth = (corpus / "debian-reference-p40.png.truth.txt").read_text()
    assert cer(text, truth) < 0.08
    assert "file modification time" in text


@pytest.mark.requires_tesseract
@pytest.mark.parametrize("factor", [None, 2.1])
def test_tesseract_gif_is_converted_and_its_dotted_zeros_read_as_zeros(
    factor: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's `ls -l` lines show a file size of 0 in a dotted-zero monospace font, which tesseract's eng
    model read as "©" at its enlargement (2×) and at 2.1× (ocr.EXCLUDED_CHARACTERS)."""
    if factor is not None:
        monkeypatch.setattr(ocr_module, "_upscale_factor", lambda width, height, dpi: factor)
    text = tesseract.recognize(corpus_bytes("debian-reference-p40.gif"))
    assert "Debian Reference" in text
    sizes = [
        line.split("penguin penguin")[1].split()[0] for line in text.splitlines() if "penguin penguin" in line
    ]
    assert sizes == ["0", "0", "0"], text


@pytest.mark.requires_tesseract
def test_tesseract_languages_probe() -> None:
    both = TesseractOcr(("eng", "kor", "zzz"))
    assert "eng" in both.languages() and "zzz" not in both.languages()
    assert not TesseractOcr(binary="/nonexistent/tesseract").available()


@pytest.mark.requires_tesseract  # without the binary the engine answers "not installed" first
def test_undecodable_image_is_permanent() -> None:
    with pytest.raises(PermanentStageError):
        tesseract.recognize(b"not an image at all")


@pytest.mark.requires_tesseract
@pytest.mark.slow
def test_scanned_pdf_ocr_in_reader(corpus: Path) -> None:
    reader = build_docreader(ocr=tesseract)
    data = corpus_bytes("debian-reference-p24-31.scan.pdf")
    result = reader.read(ReadRequest(data=data, file_name="scan.pdf", file_type="pdf"))
    truth = (corpus / "debian-reference-p24-31.scan.pdf.truth.txt").read_text()
    assert result.metadata["scanned_pages"] == list(range(1, 9))
    assert result.metadata["ocr_engine"] == "tesseract"
    assert result.images == []  # the OCR text replaced the page images
    assert cer(result.markdown, truth) < 0.05


@pytest.mark.requires_tesseract
@pytest.mark.slow
def test_scanned_pdf_three_pages_ocr() -> None:
    reader = build_docreader(ocr=tesseract)
    data = corpus_bytes("latex-usrguide-p1-3.scan.pdf")
    result = reader.read(ReadRequest(data=data, file_name="scan.pdf", file_type="pdf"))
    assert "for authors" in result.markdown and "Project Team" in result.markdown
    assert result.images == []


@pytest.mark.slow
def test_rapidocr_reads_clean_page(corpus: Path) -> None:
    engine = RapidOcr()
    if not engine.available():
        pytest.skip("rapidocr-onnxruntime not installed")
    text = engine.recognize(corpus_bytes("debian-reference-p40.png"))
    assert "modification" in text
    assert cer(text, (corpus / "debian-reference-p40.png.truth.txt").read_text()) < 0.2


def test_clean_ocr_text() -> None:
    assert clean_ocr_text("a  \n\n\n\nb\x0c\n") == "a\n\nb"


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (200, 100), (255, 255, 255)).save(buf, format="PNG")
    return buf.getvalue()


def test_textract_lines() -> None:
    client = boto3.client(
        "textract", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    blocks = [
        {"BlockType": "PAGE", "Id": "p"},
        {"BlockType": "LINE", "Id": "l1", "Text": "Invoice 2024-117"},
        {"BlockType": "WORD", "Id": "w1", "Text": "Invoice"},
        {"BlockType": "LINE", "Id": "l2", "Text": "Total: 417 EUR"},
    ]
    with Stubber(client) as stub:
        stub.add_response("detect_document_text", {"Blocks": blocks}, {"Document": {"Bytes": _png()}})
        assert TextractOcr(client).recognize(_png()) == "Invoice 2024-117\nTotal: 417 EUR"
        stub.add_client_error("detect_document_text", "UnsupportedDocumentException")
        with pytest.raises(PermanentStageError):
            TextractOcr(client).recognize(_png())
        stub.add_client_error(
            "detect_document_text",
            "ProvisionedThroughputExceededException",
            service_message="account 123456789012 at its limit",
        )
        with pytest.raises(TransientStageError) as raised:
            TextractOcr(client).recognize(_png())
        # the code is kept, what the service said is not (span errors are tenant-visible)
        assert "ProvisionedThroughputExceededException" in raised.value.message
        assert "123456789012" not in raised.value.message


def test_textract_out_of_reach_is_transient_and_a_bug_is_not_retried() -> None:
    from botocore.exceptions import EndpointConnectionError

    class Unreachable:
        def detect_document_text(self, **_: object) -> dict[str, object]:
            raise EndpointConnectionError(endpoint_url="https://textract.us-east-1.amazonaws.com")

    class Broken:
        def detect_document_text(self, **_: object) -> dict[str, object]:
            raise TypeError("a bug of ours")

    with pytest.raises(TransientStageError, match="could not be reached"):
        TextractOcr(Unreachable()).recognize(_png())
    with pytest.raises(TypeError):  # surfaces as what it is, not as an outage to retry
        TextractOcr(Broken()).recognize(_png())


whisper = WhisperAsr()


@pytest.mark.requires_whisper
def test_whisper_model_assembly_is_idempotent(tmp_path) -> None:
    first = assemble_whisper_model(tmp_path / "m")
    size = (first / "model.bin").stat().st_size
    assert size > 100_000_000
    again = assemble_whisper_model(tmp_path / "m")
    assert (again / "model.bin").stat().st_size == size
    assert {p.name for p in again.iterdir()} == {
        "model.bin",
        "model.bin.sha256",  # the verified pinned hash, so later processes skip re-hashing
        "config.json",
        "tokenizer.json",
        "vocabulary.txt",
    }


@pytest.mark.slow
@pytest.mark.requires_whisper
@pytest.mark.parametrize("name", ["speech-gpl-free.flac", "speech-python-appetite.m4a"])
def test_whisper_transcribes_corpus_audio(name: str, corpus: Path) -> None:
    text = whisper.transcribe(corpus_bytes(name), name)
    assert wer(text, (corpus / f"{name}.truth.txt").read_text()) < 0.2


@pytest.mark.requires_whisper
def test_reader_transcribes_audio_inline_and_rejects_garbage() -> None:
    reader = build_docreader(asr=whisper)
    data = corpus_bytes("speech-gpl-preamble.ogg")
    result = reader.read(ReadRequest(data=data, file_name="a.ogg", file_type="ogg"))
    assert result.is_audio and "license" in result.markdown.lower()
    with pytest.raises(PermanentStageError):
        whisper.transcribe(b"\x00\x01garbage" * 100, "x.wav")
