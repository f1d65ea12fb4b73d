"""Stage ``scan``: the files of a real dataset, listed with sizes and modification times.

DVC hashes a stage's dependencies, but the videos of ``data.root`` live outside the project
(hundreds of GB for Kinetics): hashing them on every ``dvc repro`` would cost more than the
pipeline. This stage runs every time (``always_changed`` in dvc.yaml) and writes one small
listing — every file under ``data.root`` plus the ``data.attributes`` and ``data.subjects``
CSVs, each with its size and modification time — that the index (synthesize) stage depends on.
Replacing, adding or removing a file changes the listing, so the index and everything after it
reruns; an unchanged folder writes the same bytes, and DVC skips what follows. Symbolic links are followed (a
class folder linked from elsewhere is listed with its videos), and a link loop is refused. The embedded
synthetic dataset has no files outside the project: its listing is the header alone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.params import DataParams
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes

LOG = logging.getLogger(__name__)
COLUMNS = ["path", "size", "mtime_ns"]


# the size listed for a symbolic link to nothing: once it points at a file, the listing changes


BROKEN_LINK = -1


def printable(name: str) -> str:
    """A file name as the listing writes it: UTF-8, a byte that is not (a name from another system's encoding, as
    real UCF101 / HMDB51 mirrors carry) as a backslash escape, so the CSV can hold it and it still names one file."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _entry(path: Path, shown: str) -> dict[str, object]:
    try:
        status = path.stat()
    except FileNotFoundError:
        if not path.is_symlink():
            raise PrivharError(f"{printable(str(path))}: cannot be read (not found)") from None
        LOG.warning(
            "scan: %s is a broken symbolic link (to %s): listed, not read",
            printable(str(path)),
            printable(os.readlink(path)),
        )
        return {"path": printable(shown), "size": BROKEN_LINK, "mtime_ns": path.lstat().st_mtime_ns}
    except OSError as error:
        raise PrivharError(f"{printable(str(path))}: cannot be read ({error.strerror})") from None
    return {"path": printable(shown), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _refuse_loop(folder: Path, seen: dict[tuple[int, int], Path]) -> None:
    """Folders are walked through symbolic links (a linked class folder's videos are the dataset's too, and a
    replaced one must change the listing); one reached twice is a link loop, refused in one line."""
    status = folder.stat()
    key = (status.st_dev, status.st_ino)
    if key in seen:
        raise PrivharError(
            f"data.root: {folder} is {seen[key]} again (a symbolic link loop); expected each folder once"
        )
    seen[key] = folder


def dataset_files(data: DataParams) -> list[dict[str, object]]:
    """One row per file of the real dataset (relative to ``data.root``) and per CSV that data names."""
    if data.source == "synthetic":
        return []
    if data.root is None or not Path(data.root).is_dir():
        raise PrivharError(
            f"params.yaml: data.root = {data.root!r} is not a folder (data.source = {data.source!r})"
        )
    root = Path(data.root)
    rows = []
    seen: dict[
        tuple[int, int], Path
    ] = {}  # folders walked, by (device, inode): a link back is a loop
    for folder, subfolders, names in os.walk(root, onerror=None, followlinks=True):
        _refuse_loop(Path(folder), seen)
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                path = Path(folder) / name
                rows.append(_entry(path, path.relative_to(root).as_posix()))
    for key in ("attributes", "subjects"):
        named = getattr(data, key)
        if named is not None:
            rows.append(_entry(Path(named), f"data.{key}: {Path(named).resolve()}"))
    return sorted(rows, key=lambda row: str(row["path"]))


def scan(
    *,
    data: DataParams,
    out: Annotated[Path, arg.file("Where to write the listing (CSV).", "output")],
) -> list[dict[str, object]]:
    """Write the listing of ``data``'s files to ``out`` (a CSV); return its rows."""
    rows = dataset_files(data)
    atomic_write_bytes(out, csv_bytes(rows, COLUMNS))
    LOG.info(
        "scan: %d files of %s listed in %s", len(rows), data.root or "the embedded dataset", out
    )
    return rows
