"""A study's tables as files: CSV, JSON Lines or Parquet, the same bytes for the same rows.

Columns are the row models' fields in their order (:class:`~forge_ledger.audit.metrics.
SessionMetrics`, :class:`~forge_ledger.audit.metrics.ParticipantMetrics`); a list (``without``)
is written as JSON in CSV, an unknown value as an empty CSV field or JSON ``null``. Parquet
goes through pyarrow, the ``parquet`` extra, loaded only when asked for.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from ..errors import ConfigError

__all__ = ["FORMATS", "Format", "table_bytes"]

Format = Literal["csv", "jsonl", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "jsonl", "parquet")


def _records(rows: Sequence[BaseModel], columns: Sequence[str]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json", include=set(columns)) for r in rows]


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list | dict):
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return v


def _csv(records: list[dict[str, Any]], columns: Sequence[str]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for r in records:
        writer.writerow([_csv_value(r[c]) for c in columns])
    return out.getvalue().encode()


def _jsonl(records: list[dict[str, Any]], columns: Sequence[str]) -> bytes:
    lines = [
        json.dumps({c: r[c] for c in columns}, ensure_ascii=False, separators=(",", ":"))
        for r in records
    ]
    return "".join(f"{line}\n" for line in lines).encode()


def _parquet(records: list[dict[str, Any]], columns: Sequence[str]) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise ConfigError(
            "--format parquet needs pyarrow, which is not installed",
            hint="pip install 'forge-ledger[parquet]'",
        ) from None
    table = pa.Table.from_pylist(records) if records else pa.table({c: [] for c in columns})
    sink = io.BytesIO()
    pq.write_table(table.select(list(columns)), sink, compression="zstd")
    return sink.getvalue()


def table_bytes(rows: Sequence[BaseModel], model: type[BaseModel], fmt: Format) -> bytes:
    """``rows`` (instances of ``model``) as one file of format ``fmt``."""
    columns = list(model.model_fields)
    records = _records(rows, columns)
    if fmt == "csv":
        return _csv(records, columns)
    if fmt == "jsonl":
        return _jsonl(records, columns)
    return _parquet(records, columns)
