"""The webhook settings are refused when they load out of their bounds (a clear error), not taken as they
come: more tries than a delivery message carries made try 101 a message its own handler parked as "not a
webhook delivery", and a timeout over (function timeout - margin) / batch size let a batch of posts that
never answer outlast the function, which re-posted its tries. The bounds' figures are the app's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chalicelib import settings as settings_module
from chalicelib.services.webhook_messages import DeliveryMessage
from chalicelib.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("WEKNORA_WEBHOOK_MAX_ATTEMPTS", "150", "must be from 1 to 100"),
        ("WEKNORA_WEBHOOK_MAX_ATTEMPTS", "0", "must be from 1 to 100"),
        ("WEKNORA_WEBHOOK_TIMEOUT_SECONDS", "30", "must be from 0.1 to 10"),
        ("WEKNORA_WEBHOOK_TIMEOUT_SECONDS", "0", "must be from 0.1 to 10"),
    ],
)
def test_an_out_of_range_webhook_setting_is_refused_when_the_settings_load(
    variable: str, value: str, says: str
) -> None:
    with pytest.raises(ValueError, match=f"{variable} {says}"):
        load_settings({variable: value})


def test_the_bounds_themselves_load_and_the_last_try_is_a_message_the_handler_reads() -> None:
    loaded = load_settings({"WEKNORA_WEBHOOK_MAX_ATTEMPTS": "100", "WEKNORA_WEBHOOK_TIMEOUT_SECONDS": "10"})
    assert (loaded.webhook_max_attempts, loaded.webhook_timeout_seconds) == (100, 10.0)
    last = {"kb_id": "k", "webhook_id": "w", "delivery_id": "d", "event": {}}
    assert DeliveryMessage.model_validate({**last, "attempt": loaded.webhook_max_attempts}).attempt == 100


def test_the_timeout_bound_holds_a_batch_of_posts_inside_the_webhooks_function() -> None:
    import app as app_module

    (source,) = [s for s in app_module.app.event_sources if s.name == "webhook_delivery"]
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    function_seconds = (
        config["lambda_functions"].get("webhook_delivery", {}).get("lambda_timeout", config["lambda_timeout"])
    )
    s = settings_module
    assert (source.batch_size, function_seconds) == (s.WEBHOOK_BATCH_SIZE, s.WEBHOOK_FUNCTION_SECONDS)
    assert s.WEBHOOK_TIMEOUT_MAX_SECONDS * source.batch_size + s.WEBHOOK_MARGIN_SECONDS <= function_seconds
