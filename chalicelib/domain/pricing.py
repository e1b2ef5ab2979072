"""The price table: what each metered unit costs, in US dollars, as published on the date below.

One file, so an operator can see and override it: `WEKNORA_PRICES_FILE` names a JSON object whose keys
replace entries of `PRICES` (same names and units, `as_of` included). Model tokens are priced only when a
`tokens_<kind>:<model id>` entry exists; otherwise they are reported as counts and priced at 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chalicelib.domain import metering

#: us-east-1 on-demand list prices, dollars per unit
PRICES: dict[str, float | str] = {
    "as_of": "2026-11-01",
    "region": "us-east-1",
    metering.SQS_REQUESTS: 0.40 / 1_000_000,  # standard queues, per request (64 KB chunk)
    metering.DYNAMODB_READ_UNITS: 0.125 / 1_000_000,  # on-demand read request unit
    metering.DYNAMODB_WRITE_UNITS: 0.625 / 1_000_000,  # on-demand write request unit
    metering.S3_TIER1_REQUESTS: 0.005 / 1_000,  # PUT, COPY, POST, LIST
    metering.S3_TIER2_REQUESTS: 0.0004 / 1_000,  # GET and the rest
    metering.S3_BYTES_IN: 0.0,  # transfer into S3 is free
    metering.S3_BYTES_OUT: 0.0,  # within the region (to Lambda) is free
    metering.SFN_REQUESTS: 0.0,  # API calls are not billed; transitions are
    metering.SFN_TRANSITIONS: 0.025 / 1_000,  # standard workflows
    metering.LAMBDA_GB_SECONDS: 0.0000166667,  # x86
    metering.LAMBDA_REQUESTS: 0.20 / 1_000_000,
    metering.TEXTRACT_PAGES: 1.50 / 1_000,  # DetectDocumentText
    metering.TRANSCRIBE_SECONDS: 0.024 / 60,  # standard batch, per second
    metering.OTHER_AWS_REQUESTS: 0.0,
    # Bedrock examples (per token); add your models through WEKNORA_PRICES_FILE
    metering.token_counter("input", "bedrock/amazon.titan-embed-text-v2:0"): 0.02 / 1_000_000,
    metering.token_counter("input", "bedrock/anthropic.claude-3-haiku-20240307-v1:0"): 0.25 / 1_000_000,
    metering.token_counter("output", "bedrock/anthropic.claude-3-haiku-20240307-v1:0"): 1.25 / 1_000_000,
}


class PriceTableError(ValueError):
    """The override file is not a JSON object of numbers (the operator must fix it)."""


def price_table(path: str = "") -> dict[str, float | str]:
    """The built-in table, updated by the operator's file at `path` (settings.prices_file) if one is named."""
    table = dict(PRICES)
    if path:
        try:
            override = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise PriceTableError(f"price file {path}: {error}") from error
        if not isinstance(override, dict) or not all(
            isinstance(v, int | float | str) and not isinstance(v, bool) for v in override.values()
        ):
            raise PriceTableError(f"price file {path}: expected an object of numbers")
        table.update(override)
    return table


@dataclass(frozen=True)
class CostLine:
    counter: str
    quantity: float
    unit_price: float
    dollars: float


def cost_lines(counts: Mapping[str, float], table: Mapping[str, float | str]) -> list[CostLine]:
    lines = []
    for counter in sorted(counts):
        price = table.get(counter, 0.0)
        unit = float(price) if isinstance(price, int | float) else 0.0
        lines.append(CostLine(counter, counts[counter], unit, counts[counter] * unit))
    return lines


def is_model_tokens(counter: str) -> bool:
    return counter.startswith(metering.TOKENS_PREFIX)
