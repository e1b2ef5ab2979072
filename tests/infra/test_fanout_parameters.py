"""The embedding fan-out's settings are stack parameters (`EmbedFanoutTexts`, `EmbedFanoutParallel`): each
reaches every function's environment, its default is the code's, and the function reads it back."""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import pytest

from chalicelib.settings import Settings, load_settings

from .iam_policy import ROOT

WIRED = {
    "EmbedFanoutTexts": ("WEKNORA_EMBED_FANOUT_TEXTS", "embed_fanout_texts"),
    "EmbedFanoutParallel": ("WEKNORA_EMBED_FANOUT_PARALLEL", "embed_fanout_parallel"),
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    return loaded


def embedding_concurrency() -> int:
    """The embedding queue's MaximumConcurrency, as infra/stack.py declares it."""
    sys.path.insert(0, str(ROOT / "infra"))
    try:
        spec = importlib.util.spec_from_file_location("weknora_stack", ROOT / "infra" / "stack.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "infra"))
    return int(module.MAXIMUM_CONCURRENCY["embedding"])


@pytest.mark.parametrize("parameter", sorted(WIRED))
def test_the_parameter_reaches_every_function_with_the_code_s_default(
    template: dict[str, Any], parameter: str
) -> None:
    variable, field = WIRED[parameter]
    spec = template["Parameters"][parameter]
    assert spec["Type"] == "Number" and spec["MinValue"] == 1
    assert spec["Default"] == getattr(Settings(), field) == getattr(load_settings({}), field)
    assert template["Globals"]["Function"]["Environment"]["Variables"][variable] == {"Ref": parameter}
    # CloudFormation hands a Number parameter to the environment as its decimal text
    assert getattr(load_settings({variable: "37"}), field) == 37


def test_a_document_s_slices_in_flight_stay_within_the_embedding_stage_s_concurrency(
    template: dict[str, Any],
) -> None:
    assert template["Parameters"]["EmbedFanoutParallel"]["MaxValue"] == embedding_concurrency()
