"""Manifests: the Parquet contract between stages, one row per video.

Every manifest has the columns in :data:`REQUIRED_COLUMNS`; a stage adds its own beside
them. Paths are stored relative to the manifest's folder when they lie inside it (so a
stage output can be moved or cached by DVC), absolute otherwise (a real dataset's files).
Rows are sorted by ``video_id`` and written without timestamps, so the same content gives
byte-identical files.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import PrivharError
from tasks.core.storage import atomic_write_bytes

REQUIRED_COLUMNS: dict[str, pa.DataType] = {
    "video_id": pa.string(),
    "split": pa.string(),
    "label": pa.int64(),
    "action": pa.string(),
    "path": pa.string(),
    "n_frames": pa.int64(),
    "fps": pa.float64(),
    "height": pa.int64(),
    "width": pa.int64(),
}
SPLITS = ("train", "test")
QUARANTINE_NAME = "quarantine.parquet"
MANIFEST_NAME = "manifest.parquet"


def relative_path(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` when inside it, else absolute."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    try:
        return path.relative_to(folder).as_posix()
    except ValueError:
        return path.as_posix()


def resolve_path(stored: str, folder: Path) -> Path:
    """Inverse of :func:`relative_path`."""
    path = Path(stored)
    return path if path.is_absolute() else Path(folder) / path


def rebase_path(stored: str | None, source: Path, target: Path) -> str:
    """A path stored in ``source``'s manifest, as ``target``'s manifest must store it.

    Relative paths stay relative (``../../decode/annotations/x.npz``), so a derived output
    keeps pointing at its source's files wherever the project lives.
    """
    if not stored:  # no file (a real dataset has no annotations)
        return ""
    if Path(stored).is_absolute():
        return stored
    return Path(os.path.relpath(Path(source).resolve() / stored, Path(target).resolve())).as_posix()


def write_table(
    rows: list[dict[str, Any]] | pa.Table, path: Path, schema: pa.Schema | None = None
) -> None:
    """Write a table (or any small table of rows: identities, quarantine reports) as Parquet, zstd, no timestamps."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    atomic_write_bytes(Path(path), buffer.getvalue())


def quarantined(folder: Path) -> set[str]:
    """Videos a per-video stage held back in ``folder`` (its ``quarantine.parquet``: unreadable, or short of coverage)."""
    path = Path(folder) / QUARANTINE_NAME
    return set(pl.read_parquet(path, columns=["video_id"])["video_id"]) if path.is_file() else set()


def write_manifest(rows: list[dict[str, Any]], path: Path) -> pa.Table:
    """Validate and write ``rows`` as a Parquet manifest; return the table written."""
    if not rows:
        raise PrivharError(f"{path}: refusing to write an empty manifest")
    missing = [name for name in REQUIRED_COLUMNS if name not in rows[0]]
    if missing:
        raise PrivharError(f"{path}: manifest rows lack required columns {missing}")
    rows = sorted(rows, key=lambda row: row["video_id"])
    extra = [name for name in rows[0] if name not in REQUIRED_COLUMNS]
    columns = {name: [row[name] for row in rows] for name in [*REQUIRED_COLUMNS, *extra]}
    fields = [pa.field(name, kind) for name, kind in REQUIRED_COLUMNS.items()]
    fields += [pa.field(name, pa.array(columns[name]).type) for name in extra]
    table = pa.Table.from_pydict(columns, schema=pa.schema(fields))
    write_table(table, path)
    return table


def scan_manifest(path: Path) -> pl.LazyFrame:
    """A manifest as a polars lazy scan (a stage filters or joins before anything is read); a missing or
    malformed file, or one without the required columns, is a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise PrivharError(f"{path}: manifest not found (run the stage that writes it first)")
    scan = pl.scan_parquet(path)
    try:
        columns = scan.collect_schema().names()
    except (pl.exceptions.PolarsError, OSError) as error:
        raise PrivharError(f"{path}: not a readable Parquet manifest ({error})") from None
    missing = [name for name in REQUIRED_COLUMNS if name not in columns]
    if missing:
        raise PrivharError(f"{path}: manifest lacks required columns {missing}")
    return scan


def read_manifest(path: Path, split: str | None = None) -> list[dict[str, Any]]:
    """A manifest's rows (one dict per video, ``video_id`` order), only ``split``'s when given: what a per-video
    loop iterates."""
    scan = scan_manifest(path)
    if split is not None:
        scan = scan.filter(pl.col("split") == split)
    try:
        return scan.collect().to_dicts()
    except (pl.exceptions.PolarsError, OSError) as error:
        raise PrivharError(f"{path}: not a readable Parquet manifest ({error})") from None


def copies_under(folders: Sequence[Path]) -> list[Path]:
    """Every protected copy (a folder with a manifest) directly under ``folders``, in order."""
    return [
        copy
        for folder in folders
        for copy in sorted(folder.iterdir())
        if (copy / MANIFEST_NAME).is_file()
    ]


def attribute_names(rows: list[dict[str, Any]]) -> list[str]:
    """``column`` for a boolean attribute, ``column=value`` for each value of a text one, sorted."""
    names: list[str] = []
    for column in sorted(key for key in rows[0] if key.startswith("attr_")):
        values = {row[column] for row in rows}
        if values <= {True, False}:
            names.append(column)
        else:
            names += [f"{column}={value}" for value in sorted(map(str, values))]
    return names
