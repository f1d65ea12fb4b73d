"""Stage ``anonymize``: every decoded clip (both splits) through one anonymization method.

``avatar`` (paper 001 §5.2): people removed (:mod:`tasks.anonymize.inpaint`) and replaced by
virtual humans in the same pose (:mod:`tasks.anonymize.avatars`), the avatars' pixels written
as the public mask MaskDP needs. The baselines of paper 000 §4.2 are in
:mod:`tasks.anonymize.obfuscate`.

    decode manifest ─▶ people (anonymize.source, tasks/anonymize/people.py) ─▶ method ─▶ coverage check
        ─▶ frames/<id>.npy, masks/<id>.npz (public pixels, 0/1; only methods that make any)
        └▶ quarantine.parquet (clips below anonymize.min_coverage: left out, or released black)

One output per method (``anonymize@face_blur``, ``anonymize@low_res_32x24`` …), so each feeds
training and evaluation like the raw clips do. Fail closed: a method that removes people
(avatar, blackout) or faces (face_blur) must change at least ``anonymize.min_coverage`` of the
clip's reference pixels (:mod:`tasks.anonymize.coverage`), or the clip is not released as
anonymized. The manifest adds ``coverage``, ``public_fraction`` (MaskDP's input) and where
people were searched; the method's speed (frames/s, f_speed of paper 004) goes to MLflow.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa

from tasks.anonymize.people import (
    detectors_of,
    find_people,
    resolve_source,
    video_identity,
)
from tasks.anonymize.release import protect_clip
from tasks.core import stage_options as arg
from tasks.core.anonymize_catalogue import ANONYMIZE_METHODS, method_of
from tasks.core.dp_params import PrivacyParams
from tasks.core.errors import PrivharError
from tasks.core.manifest import (
    MANIFEST_NAME,
    QUARANTINE_NAME,
    read_manifest,
    rebase_path,
    resolve_path,
    write_manifest,
    write_table,
)
from tasks.core.parallel import map_ordered, worker_count
from tasks.core.params import AnonymizeParams, BaseParams, DataParams, DecodeParams
from tasks.core.speed import write_speed
from tasks.core.storage import atomic_directory, load_frames, save_arrays, save_frames
from tasks.core.tracking import stage_run, stage_work
from tasks.privacy.budget import check_unprotected

QUARANTINE_SCHEMA = pa.schema(
    [
        ("video_id", pa.string()),
        ("split", pa.string()),
        ("coverage", pa.float64()),
        ("reason", pa.string()),
    ]
)
log = logging.getLogger(__name__)


def anonymize_one(
    row: dict[str, Any],
    *,
    method: str,
    params: AnonymizeParams,
    decode: DecodeParams,
    source_kind: str,
    seed: int,
    source: Path,
    out: Path,
    final: Path,
    workdir: Path,
) -> tuple[dict[str, Any], float]:
    """One clip: its manifest row (or a quarantine row, with ``reason``) and the method's seconds.

    Protected frames and the public mask are written only for a released clip.
    """
    frames = load_frames(workdir / resolve_path(row["path"], source))
    entry = method_of(method)
    keys = entry.people
    started, finding = time.perf_counter(), 0.0
    found, searched = None, ""
    if keys:
        found = find_people(
            row,
            frames,
            keys,
            source=source_kind,
            params=params,
            decode=decode,
            annotations=workdir / source,
            workdir=workdir,
            identity=video_identity(str(row["video_id"])),
        )
        searched = found.searched_at
        if source_kind != "ground_truth":  # reading annotations is not part of the method's cost
            finding = time.perf_counter() - started
    result = protect_clip(
        frames, found, method=method, params=params, seed=seed, people_source=source_kind
    )
    seconds = finding + result.seconds
    blacked_out = False
    if result.reason:
        if params.on_low_coverage == "quarantine":
            return {
                "video_id": str(row["video_id"]),
                "split": str(row["split"]),
                "coverage": result.coverage,
                "reason": result.reason,
            }, seconds
        log.info("anonymize: %s: %s; released black", row["video_id"], result.reason)
        result, blacked_out = result.blacked_out(), True
    protected, public = result.frames, result.public
    save_frames(workdir / out / "frames" / f"{row['video_id']}.npy", protected)
    mask = ""
    if entry.public_pixels or blacked_out:
        mask = f"masks/{row['video_id']}.npz"
        save_arrays(workdir / out / mask, public=public)
    annotations = rebase_path(row.get("annotations"), workdir / source, workdir / final)
    return {
        **row,
        "path": f"frames/{row['video_id']}.npy",
        "mask": mask,
        "annotations": annotations,
        "anonymize_method": method,
        "public_fraction": round(float(public.mean()), 6),
        "coverage": result.coverage,
        "blacked_out": blacked_out,
        "unchanged_with_people": result.unchanged,
        "people_source": source_kind if keys else "",
        "people_searched_at": searched,
    }, seconds


@stage_work
def anonymize(
    *,
    base: BaseParams,
    params: AnonymizeParams,
    decode: DecodeParams,
    data: DataParams,
    privacy: PrivacyParams,
    frames: Annotated[
        Path, arg.folder("Folder of the decoded clips (with their ground-truth annotations).")
    ],
    method: Annotated[str, arg.value(f"One of anonymize.methods: {', '.join(ANONYMIZE_METHODS)}.")],
    out: Annotated[
        Path, arg.folder("Where to write the protected clips, public masks and manifest.", "output")
    ],
    speed_path: arg.Speed = None,
) -> list[dict[str, Any]]:
    """Protect every clip of the decoded manifest in ``frames`` with ``method``; its measured frames/s to ``speed_path``.
    ``decode``: as :func:`tasks.core.params_files.load_decode` gives it; ``data``: where the people's boxes come from."""
    source_kind = resolve_source(params, data.source)
    if method not in params.methods:
        raise PrivharError(
            f"anonymize: method {method!r} is not one of anonymize.methods = {params.methods}"
        )
    # obfuscation: no DP guarantee
    check_unprotected(privacy, f"the anonymized copy anonymize@{method}")
    rows = read_manifest(frames / MANIFEST_NAME)
    finds_people = method_of(method).people and source_kind != "ground_truth"
    if finds_people and "mediapipe" in detectors_of(source_kind, params):
        from tasks.anonymize.detector import check_mediapipe

        check_mediapipe()  # one line now if it is missing, not one per worker
    with (
        stage_run(f"anonymize@{method}", {"base": base, "anonymize": params}) as run,
        atomic_directory(out) as staging,
    ):
        (staging / "frames").mkdir()
        (staging / "masks").mkdir()
        work = partial(
            anonymize_one,
            method=method,
            params=params,
            decode=decode,
            source_kind=source_kind,
            seed=base.seed,
            source=frames,
            out=staging,
            final=out,
            workdir=Path.cwd(),
        )
        results = map_ordered(
            work, rows, workers=worker_count(base.workers), desc=f"anonymize {method}"
        )
        protected = [row for row, _ in results if "reason" not in row]
        quarantined = [row for row, _ in results if "reason" in row]
        if not protected:
            raise PrivharError(
                f"anonymize: {method}: every one of the {len(rows)} videos is held back (anonymize.min_coverage = "
                f"{params.min_coverage}; first: {quarantined[0]['video_id']}: {quarantined[0]['reason']})"
            )
        write_table(quarantined, staging / QUARANTINE_NAME, schema=QUARANTINE_SCHEMA)
        write_manifest(protected, staging / MANIFEST_NAME)
        total_frames = sum(int(row["n_frames"]) for row in rows)
        seconds = sum(spent for _, spent in results)
        if speed_path is not None:
            write_speed(
                speed_path,
                frames=total_frames,
                seconds=seconds,
                measured=f"anonymize {method}: the method alone (and the detectors when they find people), one core",
            )
        copy = CopySummary(method, source_kind, len(rows), protected, quarantined)
        run.log_summary(copy.metrics(total_frames / max(seconds, 1e-9)))
        run.set_tags({"privhar.method": method, "privhar.people_source": source_kind})
        copy.say(total_frames / max(seconds, 1e-9), params.min_coverage)
    return protected


@dataclass
class CopySummary:
    """What one anonymized copy released: its summary on the stage's run and its lines in the log."""

    method: str
    source_kind: str
    videos: int
    protected: list[dict[str, Any]]
    quarantined: list[dict[str, Any]]

    def __post_init__(self) -> None:
        rows = self.protected + self.quarantined
        self.public = float(np.mean([row["public_fraction"] for row in self.protected]))
        self.covered = [row["coverage"] for row in rows if not np.isnan(row["coverage"])]
        self.blacked = sum(bool(row["blacked_out"]) for row in self.protected)
        self.empty = [
            row["video_id"]
            for row in self.protected
            if row["mask"] and not row["blacked_out"] and row["public_fraction"] == 0
        ]
        self.unchanged = [row["video_id"] for row in self.protected if row["unchanged_with_people"]]

    def metrics(self, speed: float) -> dict[str, float]:
        covered = self.covered
        return {
            "unchanged_with_people": len(self.unchanged),
            "frames_per_second": speed,
            "public_fraction": self.public,
            "videos": len(self.protected),
            "quarantined": len(self.quarantined),
            "blacked_out": self.blacked,
            "no_public_pixels": len(self.empty),
            **(
                {"coverage_min": min(covered), "coverage_mean": float(np.mean(covered))}
                if covered
                else {}
            ),
        }

    def say(self, speed: float, min_coverage: float) -> None:
        method, covered = self.method, self.covered
        for row in self.quarantined:
            log.info("anonymize: %s: quarantined %s: %s", method, row["video_id"], row["reason"])
        coverage_note = (
            f"coverage min {min(covered):.3f} mean {np.mean(covered):.3f} (min_coverage {min_coverage}); "
            f"{len(self.quarantined)} quarantined, {self.blacked} blacked out; "
            if covered
            else ""
        )
        log.info(
            "anonymize: %s: %d of %d videos released; %s%.0f frames/s (people from %s, one core), public pixels %.3f",
            method,
            len(self.protected),
            self.videos,
            coverage_note,
            speed,
            self.source_kind,
            self.public,
        )
        # said, not silent: people were found in them and the method changed no pixel
        if self.unchanged:
            log.warning(
                "anonymize: %s: %d of %d released clips are unchanged byte for byte although people were found in "
                "them (people from %s): %s",
                method,
                len(self.unchanged),
                len(self.protected),
                self.source_kind,
                _first_five(self.unchanged),
            )
        # said, not silent: these clips kept nothing public, and MaskDP has no public view of them
        if self.empty:
            log.warning(
                "anonymize: %s: %d of %d released clips have no public pixel (no person found by %s, nothing drawn; "
                "MaskDP has no public view of them): %s",
                method,
                len(self.empty),
                len(self.protected),
                self.source_kind,
                _first_five(self.empty),
            )


def _first_five(videos: list[str]) -> str:
    return ", ".join(videos[:5]) + (" …" if len(videos) > 5 else "")
