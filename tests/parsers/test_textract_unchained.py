"""Textract's answer never rides along on the stage error raised for it: not its message (the ClientError's
text) as the error's cause, nor a `Code` that is not a code (botocore takes it from whatever the endpoint
sent). Regression (found by an audit): the errors were raised `from exc`, so a logged traceback quoted it."""

from __future__ import annotations

import io
import traceback

import boto3
import pytest
from botocore.stub import Stubber
from PIL import Image

from chalicelib.domain.errors import PermanentStageError, StageError, TransientStageError
from chalicelib.parsers.ocr import TextractOcr

MARKER = "SECRET-MARKER-123"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), "white").save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("code", "expected", "kept"),
    [
        ("UnsupportedDocumentException", PermanentStageError, "UnsupportedDocumentException"),
        ("ThrottlingException", TransientStageError, "ThrottlingException"),
        (f"{MARKER} <b>not a code</b>", TransientStageError, "unknown"),
    ],
)
def test_textracts_words_are_neither_the_message_nor_the_cause(
    code: str, expected: type[StageError], kept: str
) -> None:
    client = boto3.client(
        "textract", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        stub.add_client_error("detect_document_text", code, service_message=f"{MARKER} said the service")
        with pytest.raises(expected) as raised:
            TextractOcr(client).recognize(_png())
    error = raised.value
    assert f"({kept})" in error.message and MARKER not in str(error)
    assert error.__cause__ is None and error.__suppress_context__
    assert MARKER not in "".join(traceback.format_exception(error))
