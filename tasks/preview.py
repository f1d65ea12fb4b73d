"""Stage ``preview``: the same test frames under every protection, in one PNG grid.

    data/decode ──────────────┐
    data/anonymize/<method> ──┼─▶ reports/preview/protections.png (+ the stage's MLflow run)
    data/dprp/eps<ε> ─────────┘

One row per video (the first test videos), one column per protected copy found under the
``--copies`` folders, and the avatar's public mask. This is what a person looks at first.
Raw frames appear only when ``report.show_raw`` allows it (``auto``: the synthetic dataset
only), so the tracking server never becomes a copy of real people's footage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import polars as pl

from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.figures import middle_frame, plt, png_bytes
from tasks.core.manifest import (
    MANIFEST_NAME,
    copies_under,
    read_manifest,
    resolve_path,
    scan_manifest,
)
from tasks.core.params import ReportParams
from tasks.core.storage import atomic_write_bytes
from tasks.core.tracking import stage_run, stage_work


def _public_mask(row: dict[str, Any], folder: Path, t: int) -> np.ndarray:
    if not row.get(
        "mask"
    ):  # a copy whose method makes no public pixels wrote masks only for clips it blacked out
        return np.zeros((int(row["height"]), int(row["width"]), 3), np.uint8)
    with np.load(resolve_path(row["mask"], folder)) as stored:
        return np.repeat(stored["public"][t][..., None] * 255, 3, axis=-1).astype(np.uint8)


def protections_grid(raw: Path, copies: list[Path], *, show_raw: bool, videos: int = 3) -> bytes:
    """PNG bytes: rows = test videos, columns = [raw,] each copy [, its public mask when it has one]."""
    shared = scan_manifest(raw / MANIFEST_NAME).filter(pl.col("split") == "test").select("video_id")
    for copy in copies:  # the test videos every copy holds (a copy may have quarantined some)
        shared = shared.join(
            scan_manifest(copy / MANIFEST_NAME).select("video_id"), on="video_id", how="semi"
        )
    picked = shared.sort("video_id").head(videos).collect()["video_id"].to_list()
    raw_rows = {row["video_id"]: row for row in read_manifest(raw / MANIFEST_NAME, split="test")}
    tables = {
        copy: {row["video_id"]: row for row in read_manifest(copy / MANIFEST_NAME)}
        for copy in copies
    }
    if not picked:
        raise PrivharError(
            f"preview: no test video is in {raw} and in every copy ({', '.join(map(str, copies))})"
        )
    columns: list[tuple[str, Any]] = (
        [("raw", lambda v: middle_frame(raw_rows[v], raw))] if show_raw else []
    )
    for copy in copies:
        name = f"{copy.parent.name}/{copy.name}"
        columns.append((name, lambda v, c=copy: middle_frame(tables[c][v], c)))
        if any(row.get("mask") for row in tables[copy].values()):
            columns.append(
                (
                    f"{name} public mask",
                    lambda v, c=copy: _public_mask(
                        tables[c][v], c, int(tables[c][v]["n_frames"]) // 2
                    ),
                )
            )
    figure, axes = plt.subplots(
        len(picked),
        len(columns),
        figsize=(1.9 * len(columns), 1.6 * len(picked) + 0.4),
        squeeze=False,
    )
    for line, video in zip(axes, picked):
        for axis, (title, image_of) in zip(line, columns):
            axis.imshow(image_of(video))
            axis.set_title(title if video == picked[0] else "", fontsize=6)
            axis.set_xticks([])
            axis.set_yticks([])
        line[0].set_ylabel(video, fontsize=6)
    figure.tight_layout()
    return png_bytes(figure, dpi=110)


@stage_work
def preview(
    *,
    report: ReportParams,
    show_raw: bool,
    frames: arg.RawFrames,
    copies: arg.Copies,
    out: Annotated[Path, arg.folder("Where to write protections.png.", "output")],
) -> Path:
    """Write ``out/protections.png`` (raw frames beside the copies if ``show_raw``) and log it to the stage's MLflow run;
    return its path."""
    found = copies_under(copies)
    if not found:
        raise PrivharError(
            f"preview: no protected copy (a folder with {MANIFEST_NAME}) under {', '.join(map(str, copies))}"
        )
    png = protections_grid(frames, found, show_raw=show_raw)
    target = out / "protections.png"
    with stage_run("preview", {"report": report}) as run:
        atomic_write_bytes(target, png)
        run.log_artifact(target)
        run.set_tags({"privhar.show_raw": str(show_raw)})
    return target
