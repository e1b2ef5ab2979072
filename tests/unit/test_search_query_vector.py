"""Query handling: an English-only embedding model is not asked about a query in another script."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from chalicelib.domain.text_fold import latin_share
from chalicelib.operations.search import query_vector
from chalicelib.settings import DEFAULT_EMBEDDING_MODEL, MINILM_MODEL_ID


class FakeModel:
    dimensions = 4
    max_input_chars = 100

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.ones((len(texts), self.dimensions), dtype=np.float32)


@pytest.mark.parametrize(
    ("query", "asked"),
    [
        ("how do I sort a list of tuples", True),
        ("Ünïcödé façade naïve", True),  # Latin with diacritics
        ("install it with dpkg 패키지", True),  # mostly Latin letters
        ("dpkg 패키지 설치", False),  # mostly Hangul
        ("국회의원의 임기는 4년으로 한다", False),
        ("人人生而自由 在尊严和权利上一律平等", False),
        ("パッケージ管理 apt", False),
        ("Конституция Российской Федерации", False),
        ("12345 !!", True),  # no letters: nothing to judge, ask the model
    ],
)
def test_latin_only_model_is_asked_only_about_latin_queries(query: str, asked: bool) -> None:
    for model_id in (DEFAULT_EMBEDDING_MODEL, MINILM_MODEL_ID):  # both local MiniLM spaces
        model = FakeModel(model_id)
        vector = query_vector(model, query)
        assert (vector is not None) is asked
        assert bool(model.calls) is asked


def test_multilingual_models_are_always_asked() -> None:
    model = FakeModel("bedrock/amazon.titan-embed-text-v2:0")
    assert query_vector(model, "국회의원의 임기는 4년으로 한다") is not None
    assert model.calls == [["국회의원의 임기는 4년으로 한다"]]


def test_latin_share() -> None:
    assert latin_share("abc") == 1.0
    assert latin_share("") == 1.0
    assert latin_share("ab한국") == 0.5
