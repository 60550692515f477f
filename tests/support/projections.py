"""Reading a projection database back for comparisons (no tests here)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from forge_ledger.projections import DEFAULT_PROJECTIONS

VIEW_TABLES = sorted({t for p in DEFAULT_PROJECTIONS for t in p.tables})


def canonical_dump(db_path: Path) -> str:
    """Every view table's rows, ordered by primary key, as text (byte-comparable)."""
    con = sqlite3.connect(db_path)
    try:
        lines = []
        for table in VIEW_TABLES:
            lines.append(f"-- {table}")
            for row in con.execute(f'SELECT * FROM "{table}" ORDER BY id'):
                lines.append(repr(row))
        return "\n".join(lines)
    finally:
        con.close()
