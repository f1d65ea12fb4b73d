"""Tables: polars is the table engine of every stage (issue 20); Parquet (pyarrow) and CSV are the file formats.

One writer for every table a stage prints or saves, so the Markdown of results.md, compare/private.md and
federated.md, and every CSV, come out of the same DataFrame code:

>>> frame = frame_of([{"method": "dp_sgd", "top1": "43.3 ± 3.8"}, {"method": "baseline", "top1": "76.0"}])
>>> print(markdown(frame))
| method   | top1       |
|----------|------------|
| dp_sgd   | 43.3 ± 3.8 |
| baseline | 76.0       |
>>> csv_bytes(frame).decode().splitlines()[0]
'method,top1'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tasks.core.errors import PrivharError

# polars' table printer as GitHub Markdown: every row and column, whole cells, no dtype line, no shape line
_MARKDOWN = {
    "tbl_formatting": "MARKDOWN",
    "tbl_hide_column_data_types": True,
    "tbl_hide_dataframe_shape": True,
    "tbl_rows": -1,
    "tbl_cols": -1,
    "fmt_str_lengths": 10_000,
    "tbl_width_chars": 60_000,
    "tbl_cell_numeric_alignment": "RIGHT",
}


def frame_of(
    rows: Iterable[Mapping[str, Any]], columns: Sequence[str] | None = None
) -> pl.DataFrame:
    """A DataFrame of ``rows`` (dicts), with ``columns`` in that order when given.

    A column that mixes words with numbers ("not run" beside a score) becomes text, as a CSV would hold it; a
    column no row has is empty (null).
    """
    rows = list(rows)
    if not rows:
        return pl.DataFrame(schema={name: pl.String for name in columns or []})
    frame = pl.DataFrame(rows, infer_schema_length=None, strict=False)
    if not columns:
        return frame
    return frame.with_columns(
        *(pl.lit(None).alias(name) for name in columns if name not in frame.columns)
    ).select(columns)


def markdown(frame: pl.DataFrame, headers: Sequence[str] | None = None) -> str:
    """``frame`` as a GitHub Markdown table; ``headers`` renames its columns for the reader (same order)."""
    if headers is not None:
        if len(headers) != frame.width:
            raise ValueError(f"{len(headers)} headers for {frame.width} columns")
        frame = frame.rename(dict(zip(frame.columns, headers)))
    with pl.Config(**_MARKDOWN):
        return str(frame)


def markdown_of(headers: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    """A Markdown table of display cells already formatted for the reader (one list per line, ``headers`` on top)."""
    frame = pl.DataFrame(
        [list(line) for line in lines],
        schema={f"c{index}": pl.String for index in range(len(headers))},
        orient="row",
    )
    return markdown(frame, headers)


def compact(text: str) -> str:
    """A Markdown table without its padding (``| a | b |`` per line): what a reader or a test compares.

    >>> compact(markdown_of(["x", "y"], [["1", ""]]))
    '| x | y |\\n|---|---|\\n| 1 |  |'
    """
    lines = []
    for line in text.splitlines():
        cells = (
            [cell.strip() for cell in line.strip().strip("|").split("|")]
            if line.startswith("|")
            else None
        )
        if cells is None:
            lines.append(line)
        elif all(set(cell) <= set("-:") and cell for cell in cells):
            lines.append("|" + "|".join("---" for _ in cells) + "|")
        else:
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def csv_bytes(
    table: pl.DataFrame | Iterable[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    float_precision: int | None = None,
) -> bytes:
    """A CSV file's bytes (header first) of a DataFrame or of rows, for ``atomic_write_bytes``.

    ``float_precision`` (decimals) keeps a file the same across runs whose threaded sums differ in the last bits.
    """
    frame = table if isinstance(table, pl.DataFrame) else frame_of(table, columns)
    if columns and isinstance(table, pl.DataFrame):
        frame = frame.select(columns)
    return frame.write_csv(float_precision=float_precision).encode()


def read_csv(path: Path, *, missing_ok: bool = False) -> pl.DataFrame:
    """A stage's CSV table, every cell as text (the writer's own spelling: ``inf``, ``""``), for the stage that reads it.

    ``missing_ok``: an empty table when the file is absent (the stage that writes it has not run).
    """
    path = Path(path)
    if not path.is_file():
        if missing_ok:
            return pl.DataFrame()
        raise PrivharError(f"{path}: not found; run the stage that writes it first")
    try:
        return pl.read_csv(path, infer_schema=False).fill_null("")
    except (pl.exceptions.PolarsError, OSError) as error:
        raise PrivharError(f"{path}: not a readable CSV table ({error})") from None


def read_parquet(path: Path) -> pl.DataFrame:
    """A Parquet table written by a stage (a ledger, identities); a missing or broken file is one line."""
    path = Path(path)
    if not path.is_file():
        raise PrivharError(f"{path}: not found; run the stage that writes it first")
    try:
        return pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as error:
        raise PrivharError(f"{path}: not a readable Parquet table ({error})") from None
