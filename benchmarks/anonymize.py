"""``privhar bench anonymize``: coverage and frames/s of each people source on real footage, on this machine.

It runs three stages (the index, decode, anonymize) in turn, so it lives above them, with the runners.

The footage is a UCF101-shaped folder (``make footage`` cuts OpenCV's ``vtest.avi`` into one).
It is decoded once with params.yaml's ``decode`` section; then each source — every detector
alone and the ensemble — removes people with ``avatar`` at ``min_coverage`` 0 (so every clip's
coverage is measured, none held back), and the clips that would fall below params.yaml's
``anonymize.min_coverage`` are counted. frames/s is the stage's own measure (detectors and the
method, one core per worker). Not a test: numbers depend on the machine, so the record names it.

Faces across time (issue 32), on the same clips: each protection of ``LEAKAGE_METHODS`` with the ensemble (every
member installed here) at ``min_coverage`` 0, and :func:`tasks.assess.residual.face_leakage` on every frame — of the
frames where OpenCV's Haar detector finds a face in the raw frame, the share where it finds it again in the protected
one, and of the clips the share with such a face in any frame; a plot beside the JSON when any raw face was found.
``make footage`` also cuts OpenCV's ``Megamind.avi`` (a face in 26 of 27 sampled frames) for this.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tasks.core.manifest import MANIFEST_NAME, read_manifest, resolve_path
from tasks.core.params_files import read_params_file
from tasks.core.storage import atomic_write_bytes

log = logging.getLogger(__name__)
LEAKAGE_METHODS = ("face_blur", "blackout", "avatar", "low_res_32x24")


def sources(ensemble: list[str]) -> dict[str, dict[str, Any]]:
    """Each detector alone, then the ensemble (mediapipe only where it is installed: it lives in its own environment)."""
    found = {
        "motion": {"source": "motion"},
        "hog": {"source": "ensemble", "ensemble": ["hog"]},
        "faces": {"source": "ensemble", "ensemble": ["faces"]},
    }
    has_mediapipe = importlib.util.find_spec("mediapipe") is not None
    if has_mediapipe:
        found["mediapipe"] = {"source": "detector"}
    members = [name for name in ensemble if has_mediapipe or name != "mediapipe"]
    found["ensemble (" + " + ".join(members) + ")"] = {"source": "ensemble", "ensemble": members}
    return found


def run_bench(*, root: Path, params_path: Path, out: Path) -> dict[str, Any]:
    """Decode the footage under ``root``, run every source, write the record to ``out`` (JSON) and return it."""
    from flows.stage_commands import stage_call

    anonymize = stage_call("anonymize")
    decode = stage_call("decode")
    synthesize = stage_call("synthesize")

    params = read_params_file(params_path)
    threshold = float(params["anonymize"]["min_coverage"])
    with tempfile.TemporaryDirectory(prefix="privhar-bench-") as scratch:
        folder = Path(scratch)
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"  # not the project's

        params["data"] = {
            **params["data"],
            "source": "ucf101",
            "root": str(root.resolve()),
            "split": 1,
        }
        params["base"]["workers"] = 1
        base_params = folder / "params.yaml"
        base_params.write_text(yaml.safe_dump(params))
        synthesize(params_path=base_params, out=folder / "source")
        decoded = decode(params_path=base_params, source=folder / "source", out=folder / "decode")
        results = [
            _trial(anonymize, params, folder, index, name, settings)
            for index, (name, settings) in enumerate(
                sources(params["anonymize"]["ensemble"]).items()
            )
        ]
        leakage = face_leakage_rows(params, folder, sources(params["anonymize"]["ensemble"]))
    record = {
        "footage": str(root),
        "clips": len(decoded),
        "decode": params["decode"],
        "min_coverage": threshold,
        "method": "avatar",
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "measured": "frames/s of the anonymize stage: the people source and the method, one core",
        "sources": results,
        "face_leakage": leakage,
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    if any(row["face_leak_frames"] is not None for row in leakage):
        from tasks.report.plots import face_leakage_png

        atomic_write_bytes(out.with_suffix(".png"), face_leakage_png(leakage))
    return record


def _trial(
    anonymize: Any,
    params: dict[str, Any],
    folder: Path,
    index: int,
    name: str,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The avatar method with one people source on the decoded footage: its coverage and frames/s."""
    threshold = float(params["anonymize"]["min_coverage"])
    trial = {
        **params,
        "anonymize": {
            **params["anonymize"],
            **settings,
            "methods": ["avatar"],
            "min_coverage": 0.0,
        },
    }
    trial_params = folder / f"{index}.yaml"
    trial_params.write_text(yaml.safe_dump(trial))
    speed_path = folder / f"{index}.json"
    rows = anonymize(
        params_path=trial_params,
        frames=folder / "decode",
        method="avatar",
        out=folder / f"avatar-{index}",
        speed_path=speed_path,
    )
    covered = [row["coverage"] for row in rows]
    result = {
        "source": name,
        "clips": len(rows),
        "coverage_min": round(min(covered), 4),
        "coverage_mean": round(float(np.mean(covered)), 4),
        "below_min_coverage": sum(value < threshold for value in covered),
        "frames_per_second": json.loads(speed_path.read_text())["frames_per_second"],
    }
    log.info(
        "bench anonymize: %s: coverage min %.3f mean %.3f, %d of %d clips below %.2f, %.1f frames/s",
        name,
        result["coverage_min"],
        result["coverage_mean"],
        result["below_min_coverage"],
        len(rows),
        threshold,
        result["frames_per_second"],
    )
    return result


def face_leakage_rows(
    params: dict[str, Any],
    folder: Path,
    available: dict[str, dict[str, Any]],
    methods: tuple[str, ...] = LEAKAGE_METHODS,
) -> list[dict[str, Any]]:
    """Per protection of ``methods``: faces found again in the frames (and clips) of every video ``folder / decode``
    holds, and how many frames and clips had a face the raw frame's detector found."""
    from flows.stage_commands import stage_call

    anonymize = stage_call("anonymize")
    from tasks.assess.residual import UPSCALE, face_leakage
    from tasks.assess.truth import clips_of
    from tasks.people_finding.opencv_detectors import face_boxes

    rows = read_manifest(folder / "decode" / MANIFEST_NAME)
    raw = clips_of(rows, folder / "decode")
    ensemble = list(available.values())[-1]  # the last source: every installed member together
    faces = {
        video: [bool(face_boxes(frame, UPSCALE)) for frame in clip] for video, clip in raw.items()
    }
    counted = {
        "frames": sum(len(found) for found in faces.values()),
        "frames_with_a_raw_face": sum(sum(found) for found in faces.values()),
        "clips_with_a_raw_face": sum(any(found) for found in faces.values()),
    }
    measured = []
    for method in methods:
        trial = {
            **params,
            "anonymize": {
                **params["anonymize"],
                **ensemble,
                "methods": [method],
                "min_coverage": 0.0,
                "on_low_coverage": "blackout",  # a clip the face judge holds back is measured, black
            },
        }
        trial_params = folder / f"leak-{method}.yaml"
        trial_params.write_text(yaml.safe_dump(trial))
        copy = folder / f"leak-{method}"
        anonymize(params_path=trial_params, frames=folder / "decode", method=method, out=copy)
        public = {}
        for row in read_manifest(copy / MANIFEST_NAME):
            if row.get("mask"):
                with np.load(resolve_path(row["mask"], copy)) as stored:
                    public[row["video_id"]] = stored["public"]
        scores = face_leakage(raw, clips_of(rows, copy), public, [row["video_id"] for row in rows])
        measured.append({"method": f"anonymize: {method}", **scores, **counted})
        log.info("bench anonymize: faces kept after %s: %s", method, scores)
    return measured
