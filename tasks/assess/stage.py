"""Stage ``assess``: how private and how useful each protected copy is, attacker by attacker.

    data/decode (raw, annotated) ───────┬─▶ raw-trained attackers: attribute CNN, face recognisers, HOG detectors
    data/anonymize/<m>, data/dprp/eps<ε> ┴─▶ per copy: attribute cMAP / F1 (raw-trained and adaptive attacker),
    reports/speed/<copy>.json ───────────┘   e_id ind / aggr / fused, e_det face and body ind / aggr / fused,
                                             e_track, e_sim (SSIM, MSE), e_speed ─▶ out/signature.json, .csv

The raw copy is assessed too: it is the reference (no protection, e_speed = 1 since there is no
filter). Copies are assessed in parallel (``base.workers``); every attacker is seeded, so the
numbers do not depend on the number of workers.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from tasks.assess.attackers import RAW, train_raw_attackers
from tasks.assess.copy_scores import ATTRIBUTE_SCORES, assess_copy
from tasks.assess.truth import clips_of, load_truth
from tasks.core import stage_options as arg
from tasks.core.errors import PrivharError
from tasks.core.manifest import MANIFEST_NAME, copies_under, read_manifest
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import AssessParams, BaseParams
from tasks.core.scores import LEFT_COLUMNS, SIGNATURE_COLUMNS
from tasks.core.storage import atomic_write_bytes
from tasks.core.tables import csv_bytes
from tasks.core.tracking import StageRun, stage_run, stage_work
from tasks.video_models.clips import split_rows
from tasks.video_models.device import resolve_device

log = logging.getLogger(__name__)


def copy_name(folder: Path) -> str:
    """``data/anonymize/avatar`` → ``anonymize-avatar``: the key its trained model has in evaluate."""
    return f"{folder.parent.name}-{folder.name}"


@stage_work
def assess(
    *,
    base: BaseParams,
    params: AssessParams,
    frames: Annotated[
        Path,
        arg.folder("Folder of the decoded (raw) clips with their annotations: the ground truth."),
    ],
    copies: arg.Copies,
    speeds: Annotated[
        Path, arg.folder("Folder of the protecting stages' <copy>.json (measured frames/s).")
    ],
    out: Annotated[Path, arg.folder("Where to write signature.json and signature.csv.", "output")],
) -> list[dict[str, Any]]:
    """Assess the raw copy and every protected copy under ``copies``; write ``out/signature.json`` and ``.csv``."""
    rows = read_manifest(frames / MANIFEST_NAME)
    train_rows, test_rows = _splits(rows, frames / MANIFEST_NAME)
    found = copies_under(copies)
    if not found:
        raise PrivharError(
            f"assess: no protected copy (a folder with {MANIFEST_NAME}) under {', '.join(map(str, copies))}"
        )
    # real footage has no annotations: e_id / e_det / e_track are then not measured, the residual detections are
    truths = (
        {row["video_id"]: load_truth(row, frames) for row in rows}
        if any(row.get("annotations") for row in rows)
        else {}
    )
    with stage_run("assess", {"base": base, "assess": params}) as run:
        _say_unmeasured(rows, truths, frames / MANIFEST_NAME)
        log.info("assess: training the raw attackers on %d videos", len(train_rows))
        device = str(resolve_device(base.device))  # the attribute attackers train there
        attackers = train_raw_attackers(
            params, base.seed, train_rows, frames, clips_of(train_rows, frames), truths, device
        )
        work = partial(
            assess_copy,
            raw=frames,
            train_rows=train_rows,
            test_rows=test_rows,
            truths=truths,
            attackers=attackers,
            params=params,
            seed=base.seed,
            speeds=speeds,
            device=device,
        )
        items = [(RAW, frames)] + [(copy_name(folder), folder) for folder in found]
        results = map_ordered(work, items, workers=worker_count(base.workers), desc="assess copies")
        _write_signature(results, out, run)
        for result in results:
            _log_scores(result)
    return results


def _text(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f}"


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) and np.isfinite(value) else value


def _splits(rows: list[dict[str, Any]], manifest: Path) -> tuple[list[dict], list[dict]]:
    """The train and test rows; assess needs both."""
    train_rows, test_rows = split_rows(rows, "train"), split_rows(rows, "test")
    if not train_rows or not test_rows:
        raise PrivharError(
            f"{manifest}: assess needs videos in both splits "
            f"(train {len(train_rows)}, test {len(test_rows)})"
        )
    return train_rows, test_rows


def _say_unmeasured(rows: list[dict[str, Any]], truths: dict, manifest: Path) -> None:
    """Said, not silent: the scores this dataset cannot give."""
    if not any(key.startswith("attr_") for key in rows[0]):
        log.info(
            "assess: %s has no attr_* columns (data.attributes): attribute cMAP / F1 not measured",
            manifest,
        )
    if not truths:
        log.info(
            "assess: no face / body annotations: e_id, e_det and e_track not measured (residual detections are)"
        )


def _write_signature(results: list[dict[str, Any]], out: Path, run: StageRun) -> None:
    """``out/signature.csv`` (every copy's scores, rounded) and ``signature.json`` (the scores by copy)."""
    columns = [
        "copy",
        *ATTRIBUTE_SCORES,
        *SIGNATURE_COLUMNS,
        *LEFT_COLUMNS,
        "frames_per_second",
        "face_occurrences",
        "folder",
    ]
    table = [{key: _rounded(result.get(key)) for key in columns} for result in results]
    atomic_write_bytes(out / "signature.csv", csv_bytes(table, columns))
    # every copy's scores as one table on the run, not a metric key per copy and score: the report's run has a
    # run per row with its attack scores under plain names
    run.log_artifact(out / "signature.csv")
    metrics = {
        row["copy"]: {
            key: row[key] for key in (*ATTRIBUTE_SCORES, *SIGNATURE_COLUMNS, *LEFT_COLUMNS)
        }
        for row in table
    }
    atomic_write_bytes(
        out / "signature.json", (json.dumps(metrics, indent=2, sort_keys=True) + "\n").encode()
    )


def _log_scores(result: dict[str, Any]) -> None:
    log.info(
        "assess: %s: cMAP %s (adaptive %s), e_id %s/%s/%s, e_det face %s body %s, e_track %s, SSIM %.3f, "
        "e_speed %.3f; left: coverage %s, %d quarantined, %s without an avatar, %.2f people and %.2f faces found per frame, "
        "%.3f of the person pixels (%.0f s)",
        result["copy"],
        *(
            _text(result[key])
            for key in (
                "cmap_raw_attacker",
                "cmap_adaptive",
                "e_id_ind",
                "e_id_aggr",
                "e_id_fused",
                "e_det_face_ind",
                "e_det_body_ind",
                "e_track",
            )
        ),
        result["e_sim_ssim"],
        result["e_speed"],
        _text(result["coverage"]),
        result["quarantined"],
        "n/a" if result["no_avatar"] is None else result["no_avatar"],
        result["residual_people"],
        result["residual_faces"],
        result["residual_pixels"],
        result["assess_seconds"],
    )
