"""Issue 12's generated order export: ten short columns, ~53 bytes a CSV row (60,000 rows are ~3 MB).
One generator for the chunker tests, the end-to-end table tests and `bench/bench_chunker.py`."""

from __future__ import annotations

COLUMNS = "order_id,customer,country,product_sku,quantity,unit_price,currency,status,created_at,warehouse"
#: the SKU of the `marked` row, found nowhere else (what a search for a cell value asks)
MARKED_SKU = "QX77731Z"
_COUNTRIES = ("DE", "FR", "US", "JP")


def _sku(i: int, marked: int | None) -> str:
    return MARKED_SKU if i == marked else f"S{i * 31 % 99991}"


def order_line(i: int, marked: int | None = None) -> str:
    """Row i as a CSV line."""
    return (
        f"{i},c{i * 7 % 9973},{_COUNTRIES[i % 4]},{_sku(i, marked)},{i % 9 + 1},{i % 97}.{i % 100:02d},"
        f"EUR,{'paid' if i % 3 else 'open'},2026-0{i % 9 + 1}-1{i % 10},W{i % 9 + 1}"
    )


def orders_csv(rows: int, marked: int | None = None) -> str:
    return "\n".join([COLUMNS, *(order_line(i, marked) for i in range(rows))]) + "\n"


def order_cells(i: int, marked: int | None = None) -> list[str | int | float]:
    """Row i as spreadsheet cells (the same ten columns; the price a number)."""
    return [
        i,
        f"c{i * 7 % 9973}",
        _COUNTRIES[i % 4],
        _sku(i, marked),
        i % 9 + 1,
        i % 97 + (i % 100) / 100,
        "EUR",
        "paid" if i % 3 else "open",
        f"2026-0{i % 9 + 1}-1{i % 10}",
        f"W{i % 9 + 1}",
    ]
