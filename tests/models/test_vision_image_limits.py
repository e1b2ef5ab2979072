"""What the vision adapters send for the images documents hold: a VLM takes png/jpeg/gif/webp of one frame
within its size caps (Bedrock: 3.75 MB, 8,000 px a side), so a BMP or TIFF from an office file, a CMYK or
16-bit image, an animated GIF or a large photo is sent as its first frame re-encoded (scaled down when too
large) instead of being refused by the model; a decompression bomb is refused before it is decoded."""

from __future__ import annotations

import io
import os
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import ANY, Stubber
from PIL import Image

from chalicelib.adapters.models.bedrock import BedrockVisionModel
from chalicelib.ports import ModelRequestError

#: Bedrock's caps on an image (Converse API)
BEDROCK_MAX_BYTES = 3_750_000
BEDROCK_MAX_SIDE = 8_000


def encoded(img: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **options)
    return out.getvalue()


def decoded(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (80, 80), (60 * i, 0, 0)) for i in (1, 2, 3)]
    return encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def noisy_png(side: int) -> bytes:
    return encoded(Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)), "PNG")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("bmp", encoded(Image.new("RGB", (120, 90), (10, 20, 30)), "BMP")),
        ("tiff", encoded(Image.new("RGB", (120, 90), (10, 20, 30)), "TIFF")),
        ("cmyk jpeg", encoded(Image.new("CMYK", (120, 90), (0, 50, 100, 0)), "JPEG")),
        ("16-bit png", encoded(Image.new("I;16", (120, 90), 30_000), "PNG")),
        ("animated gif", animated_gif()),
    ],
)
def test_an_image_a_vlm_refuses_is_sent_as_one_plain_frame(name: str, data: bytes) -> None:
    sent, fmt = sent_to_bedrock(data)
    img = decoded(sent)
    assert fmt in ("png", "jpeg") and img.format.lower() == fmt, name
    assert img.mode in ("L", "RGB", "RGBA", "P") and getattr(img, "n_frames", 1) == 1, name
    assert img.size == (120, 90) or name == "animated gif"
    if name == "16-bit png":  # mid-grey stays mid-grey: not clipped to white
        assert img.convert("L").getpixel((5, 5)) == 117


def test_an_image_over_the_size_caps_is_scaled_down_to_fit() -> None:
    wide = encoded(Image.new("L", (BEDROCK_MAX_SIDE + 400, 50), 200), "PNG")
    sent, _fmt = sent_to_bedrock(wide)
    assert max(decoded(sent).size) <= BEDROCK_MAX_SIDE

    heavy = noisy_png(1400)  # ~5.9 MB of noise: over Bedrock's 3.75 MB
    assert len(heavy) > BEDROCK_MAX_BYTES
    sent, _fmt = sent_to_bedrock(heavy)
    assert len(sent) <= BEDROCK_MAX_BYTES and decoded(sent).size[0] > 0


def test_a_re_encoded_photo_keeps_its_orientation() -> None:
    img = Image.new("RGB", (120, 90), (10, 20, 30))
    exif = img.getexif()
    exif[274] = 6  # Orientation: turned 90° clockwise when shown
    sent, _fmt = sent_to_bedrock(encoded(img, "TIFF", exif=exif))
    assert decoded(sent).size == (90, 120)


def test_a_plain_image_is_sent_as_it_is() -> None:
    png = encoded(Image.new("RGB", (64, 64), (1, 2, 3)), "PNG")
    assert sent_to_bedrock(png) == (png, "png")


def test_a_decompression_bomb_is_refused_without_decoding_it() -> None:
    bomb = encoded(Image.new("1", (10_000, 10_000), 0), "PNG")  # 100 Mpx in a few KB
    with pytest.raises(ModelRequestError, match="pixels"):
        sent_to_bedrock(bomb)


def sent_to_bedrock(data: bytes) -> tuple[bytes, str]:
    """(bytes, format) of the image block BedrockVisionModel.describe sends for `data`."""
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"total_max_attempts": 1}),
    )
    captured: list[dict[str, Any]] = []

    def capture(params: dict[str, Any], **_: Any) -> None:
        captured.append(params)

    client.meta.events.register("before-parameter-build.bedrock-runtime.Converse", capture)
    with Stubber(client) as stub:
        stub.add_response(
            "converse",
            {
                "output": {"message": {"role": "assistant", "content": [{"text": "A picture."}]}},
                "stopReason": "end_turn",
                "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
                "metrics": {"latencyMs": 1},
            },
            {"modelId": "m", "messages": ANY, "inferenceConfig": ANY},
        )
        assert BedrockVisionModel(client, "m").describe(data, "Describe.") == "A picture."
    block = captured[0]["messages"][0]["content"][0]["image"]
    return block["source"]["bytes"], block["format"]
