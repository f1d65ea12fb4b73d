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
from tasks.core.params import (
    AnonymizeParams,
    BaseParams,
    DataParams,
    DecodeParams,
    PrivacyParams,
)
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
    ``decode``: as :func:`tasks.core.params.load_decode` gives it; ``data``: where the people's boxes come from."""
    source_kind = resolve_source(params, data.source)
    if method not in params.methods:
        raise PrivharError(
            f"anonymize: method {method!r} is not one of anonymize.methods = {params.methods}"
        )
    check_unprotected(
        privacy, f"the anonymized copy anonymize@{method}"
    )  # obfuscation: no DP guarantee
    rows = read_manifest(frames / MANIFEST_NAME)
    if (
        method_of(method).people
        and "mediapipe" in detectors_of(source_kind, params)
        and source_kind != "ground_truth"
    ):
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
        seconds = sum(spent for _, spent in results)
        write_table(quarantined, staging / QUARANTINE_NAME, schema=QUARANTINE_SCHEMA)
        write_manifest(protected, staging / MANIFEST_NAME)
        total_frames = sum(int(row["n_frames"]) for row in rows)
        speed = total_frames / max(seconds, 1e-9)
        if speed_path is not None:
            write_speed(
                speed_path,
                frames=total_frames,
                seconds=seconds,
                measured=f"anonymize {method}: the method alone (and the detectors when they find people), one core",
            )
        public = float(np.mean([row["public_fraction"] for row in protected]))
        covered = [
            row["coverage"] for row in protected + quarantined if not np.isnan(row["coverage"])
        ]
        blacked = sum(bool(row["blacked_out"]) for row in protected)
        empty = [
            row["video_id"]
            for row in protected
            if row["mask"] and not row["blacked_out"] and row["public_fraction"] == 0
        ]
        unchanged = [row["video_id"] for row in protected if row["unchanged_with_people"]]
        run.log_summary(
            {
                "unchanged_with_people": len(unchanged),
                "frames_per_second": speed,
                "public_fraction": public,
                "videos": len(protected),
                "quarantined": len(quarantined),
                "blacked_out": blacked,
                "no_public_pixels": len(empty),
                **(
                    {"coverage_min": min(covered), "coverage_mean": float(np.mean(covered))}
                    if covered
                    else {}
                ),
            }
        )
        run.set_tags({"privhar.method": method, "privhar.people_source": source_kind})
        for row in quarantined:
            log.info("anonymize: %s: quarantined %s: %s", method, row["video_id"], row["reason"])
        coverage_note = (
            f"coverage min {min(covered):.3f} mean {np.mean(covered):.3f} (min_coverage {params.min_coverage}); "
            f"{len(quarantined)} quarantined, {blacked} blacked out; "
            if covered
            else ""
        )
        log.info(
            "anonymize: %s: %d of %d videos released; %s%.0f frames/s (people from %s, one core), public pixels %.3f",
            method,
            len(protected),
            len(rows),
            coverage_note,
            speed,
            source_kind,
            public,
        )
        if unchanged:  # said, not silent: people were found in them and the method changed no pixel
            log.warning(
                "anonymize: %s: %d of %d released clips are unchanged byte for byte although people were found in "
                "them (people from %s): %s",
                method,
                len(unchanged),
                len(protected),
                source_kind,
                ", ".join(unchanged[:5]) + (" …" if len(unchanged) > 5 else ""),
            )
        if empty:  # said, not silent: these clips kept nothing public, and MaskDP has no public view of them
            log.warning(
                "anonymize: %s: %d of %d released clips have no public pixel (no person found by %s, nothing drawn; "
                "MaskDP has no public view of them): %s",
                method,
                len(empty),
                len(protected),
                source_kind,
                ", ".join(empty[:5]) + (" …" if len(empty) > 5 else ""),
            )
    return protected
